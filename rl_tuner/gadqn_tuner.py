"""``GADQNTuner``: an elitist GA whose crossover point and mutated knob are chosen by two DQNs.

One generation, top to bottom (``PopulationTuner._next_member``; this class is its breeder):

1. keep the ``elite_num`` best members;
2. give two slots to immigrants: the screen model's pick of 512 random unvisited configs;
3. for every other slot breed ``screen`` candidates and measure only the one an XGBoost ranking
   model (refit every generation) ranks first. A candidate is bred by
   - the crossover agent: state = both parents' genes and fitness, action = the cut point;
   - the mutation agent: state = the child's genes and split levels, action = a knob and a
     move (a tile factor moved from one level to another, a numeric option up or down, or a
     redraw), or "keep" when the crossover child is new;
4. reward both agents for the measured child (by default: how much it beats its better parent).

``action_policy="random"`` is the ablation: the same GA with uniform choices and no networks.
States and actions are padded to ``max_knobs`` so that a saved agent can start on a task with
another knob count. docs/findings.md gives what each part is worth, measured.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch

from autotvm.checks import AutoTVMError, choice, integer, text
from autotvm.task.space import DIRECTIONS, MAX_LEVELS, SplitEntity
from autotvm.tuner.population import Member, PopulationTuner

from .dqn import DQNAgent, DQNConfig

REWARDS = ("improvement", "score", "r1", "r2", "r3")
MODES = ("train", "greedy", "continue")
POLICIES = ("dqn", "random")
MUTATIONS = ("directed", "redraw")
# the mutation agent's moves per ``mutation``: a direction is an index into DIRECTIONS
MOVES = {"directed": (*range(len(DIRECTIONS)), "redraw"), "redraw": ("redraw",)}
FAILURE_PENALTY = 0.1  # reward of a child that failed to build or run: small, so a risky move is not shunned
REWARD_CAP = 2.0  # rewards are relative to the best so far; a lucky outlier must not swamp the others
IMMIGRANTS = 2  # model-picked random slots per generation when screening (a global search beside breeding)
CHECKPOINT_FORMAT = 2  # bumped when the agents' state or action layout changes


class GADQNTuner(PopulationTuner):
    """GA-DQN: an elitist genetic algorithm whose choices are made by two deep Q-networks.

    Parameters
    ----------
    task : Task
        The task to tune.
    pop_size : int
        Members per generation (16). With 64-200 trials a small population gets several generations.
    elite_num : int
        Best members carried unchanged into the next generation (3).
    reward : str
        ``"improvement"`` (default): how much a child beats its better parent, over the best so far;
        ``"score"``: the child's speed over the best so far; ``"r1"``, ``"r2"``, ``"r3"``: the
        original study's reward functions.
    action_policy : str
        ``"dqn"`` (default) or ``"random"``: uniform choices, the ablation that measures what the
        Q-networks add.
    mutation : str
        ``"directed"`` (default): a knob and a named move, seeing the tile sizes; ``"redraw"``: a
        knob redrawn uniformly, as AutoTVM's and the original study's GA do.
    screen : int
        Candidates bred per measured child (16); the screen model picks which one is measured.
        ``1`` measures every child bred (and turns immigrants off).
    mode : str
        ``"train"`` (default) from scratch; ``"greedy"`` acts with a loaded agent and does not
        learn; ``"continue"`` goes on training a loaded agent. The last two need ``checkpoint``.
    checkpoint : str, optional
        Path of agents saved by ``save``.
    max_knobs : int, optional
        Knobs the agents' networks are sized for (at least the task's, 24 by default): an agent
        saved on one task starts on another with up to this many knobs.
    dqn : DQNConfig or dict, optional
        The agents' hyper-parameters (see ``rl_tuner.dqn.DQNConfig``).
    seed : int, optional
        Makes every proposal deterministic for the same measurements.
    """

    OPTIONS = {**PopulationTuner.OPTIONS, "reward": choice(REWARDS), "action_policy": choice(POLICIES),
               "mutation": choice(MUTATIONS), "mode": choice(MODES), "checkpoint": text(none=True),
               "max_knobs": integer(1, none=True), "dqn": {"type": "object", "properties": DQNConfig.RULES,
                                                           "additionalProperties": False}}
    del OPTIONS["immigrants"]  # two a generation when screening (IMMIGRANTS), none without

    def __init__(self, task: Any, pop_size: int = 16, elite_num: int = 3, reward: str = "improvement",
                 action_policy: str = "dqn", mutation: str = "directed", screen: int = 16, mode: str = "train",
                 checkpoint: str | None = None, max_knobs: int | None = None,
                 dqn: DQNConfig | dict | None = None, seed: int | None = None) -> None:
        self.check_options(pop_size=pop_size, elite_num=elite_num, screen=screen, reward=reward,
                           action_policy=action_policy, mutation=mutation, mode=mode, checkpoint=checkpoint,
                           max_knobs=max_knobs)
        if mode != "train" and not checkpoint:
            raise AutoTVMError(f"mode {mode!r} needs checkpoint=<path of a saved agent>")
        if dqn is not None and not isinstance(dqn, (DQNConfig, dict)):
            raise AutoTVMError(f"dqn must be a DQNConfig or a dict of its fields, got {dqn!r}")
        immigrants = 0 if screen == 1 else max(0, min(IMMIGRANTS, pop_size - elite_num - 1))
        super().__init__(task, pop_size=pop_size, elite_num=elite_num, screen=screen, immigrants=immigrants, seed=seed)
        self.reward_name, self.action_policy, self.mode = reward, action_policy, mode
        self.moves = MOVES[mutation]
        self.n_knobs = len(self.dims)
        self.dims_arr = np.array(self.dims, dtype=np.float64)
        self.monitor: list[dict] = []  # one row per measured child: reward, actions, losses, epsilon
        self._move_mask: np.ndarray | None = None
        if mode != "train":
            self.load(checkpoint)
            if mode == "greedy":
                self.crossover_agent.training = self.mutation_agent.training = False
        else:
            self.max_knobs = max(self.n_knobs, max_knobs or 24)
            config = dqn if isinstance(dqn, DQNConfig) else DQNConfig.from_dict(dqn or {})
            self._make_agents(config)
        if self.n_knobs > self.max_knobs:
            raise AutoTVMError(f"the task has {self.n_knobs} knobs but the agent handles at most {self.max_knobs}")
        self._level_tables = [self._level_table(knob) for knob in self.space.knobs]

    def _make_agents(self, config: DQNConfig) -> None:
        seed = None if self.seed is None else int(self.seed)
        self.crossover_agent = DQNAgent(2 * self.max_knobs + 2, max(self.max_knobs - 1, 1), config, seed)
        state_dim = self.max_knobs + self.n_level_features
        self.mutation_agent = DQNAgent(state_dim, len(self.moves) * self.max_knobs + 1, config,
                                       None if seed is None else seed + 1)

    # -- states and masks
    @property
    def directed(self) -> bool:
        """Whether mutation moves are named directions (``mutation="directed"``)."""
        return isinstance(self.moves[0], int)

    @property
    def n_level_features(self) -> int:
        """State features after the genes for "directed": every knob's split levels."""
        return self.max_knobs * MAX_LEVELS if self.directed else 0

    def _genes(self, knobs: np.ndarray | list) -> np.ndarray:
        """Knob indices scaled to [0, 1], zero-padded to ``max_knobs`` (one knob vector, or rows of them)."""
        knobs = np.asarray(knobs, dtype=np.float64)
        out = np.zeros(knobs.shape[:-1] + (self.max_knobs,), np.float32)
        out[..., : self.n_knobs] = knobs / np.maximum(self.dims_arr - 1, 1)
        return out

    @staticmethod
    def _level_table(knob: Any) -> np.ndarray:
        """Per value of a knob, its split levels as log2(factor) / log2(extent), outermost first
        (zeros for other knobs): the tile sizes that a direction moves factors between, which
        the gene (an index into a list of factorizations) does not show."""
        table = np.zeros((len(knob), MAX_LEVELS), np.float32)
        for v, entity in enumerate(knob.entities):
            if isinstance(entity, SplitEntity) and np.prod(entity.size) > 1:
                sizes = np.log2(np.array(entity.size[:MAX_LEVELS], np.float64))
                table[v, : len(sizes)] = sizes / np.log2(np.prod(entity.size))
        return table

    def _levels(self, knobs: list[list[int]]) -> np.ndarray:
        out = np.zeros((len(knobs), self.max_knobs, MAX_LEVELS), np.float32)
        rows = np.asarray(knobs, dtype=np.int64)
        for i, table in enumerate(self._level_tables):
            out[:, i] = table[rows[:, i]]
        return out.reshape(len(knobs), -1)

    def _fitness(self, score: float | None) -> float:
        return float(score or 0.0) / self.best_flops if self.best_flops > 0 else 0.0

    def mutation_states(self, children: list[list[int]]) -> np.ndarray:
        """The mutation agent's states: the children's genes and, with directions, their split levels."""
        parts = [self._genes(children)] + ([self._levels(children)] if self.directed else [])
        return np.concatenate(parts, axis=1)

    def crossover_states(self, pairs: list[tuple[Member, Member]]) -> np.ndarray:
        """The crossover agent's states: both parents' genes and fitness (over the best so far)."""
        fitness = np.array([[self._fitness(p1.score), self._fitness(p2.score)] for p1, p2 in pairs], np.float32)
        return np.concatenate([self._genes([p1.knob for p1, _ in pairs]), self._genes([p2.knob for _, p2 in pairs]),
                               fitness], axis=1)

    def crossover_mask(self) -> np.ndarray:
        mask = np.zeros(self.crossover_agent.n_actions, bool)
        mask[: max(self.n_knobs - 1, 0)] = True  # action a cuts before knob a+1
        return mask

    def mutation_masks(self, keep_allowed: list[bool], children: list[list[int]] | None = None) -> np.ndarray:
        """One row per child: every move on knobs with more than one value (with directions,
        only those with a step from the child's value), plus "keep" (last) where the unmutated
        child is new. Action ``m * max_knobs + i`` is move ``self.moves[m]`` on knob ``i``."""
        if self._move_mask is None:
            self._move_mask = np.zeros(self.mutation_agent.n_actions, bool)
            for m in range(len(self.moves)):
                self._move_mask[m * self.max_knobs: m * self.max_knobs + self.n_knobs] = self.dims_arr > 1
        masks = np.repeat(self._move_mask[None], len(keep_allowed), axis=0)
        if self.directed and children is not None:
            valid = np.ones((len(children), len(DIRECTIONS), self.max_knobs), bool)
            for i, knob in enumerate(self.space.knobs):
                valid[:, :, i] = np.stack([knob.valid_directions(child[i]) for child in children])
            masks[:, : valid[0].size] &= valid.reshape(len(children), -1)
        masks[:, -1] = keep_allowed
        masks[~masks.any(axis=1), 0] = True
        return masks

    @property
    def keep_action(self) -> int:
        return self.mutation_agent.n_actions - 1

    def decode_mutation(self, action: int) -> tuple[int | None, str | int | None]:
        """(knob, move) of a mutation action; (None, None) for "keep"."""
        if action == self.keep_action:
            return None, None
        return action % self.max_knobs, self.moves[action // self.max_knobs]

    # -- choices: the networks, or the uniform ablation
    def _choose(self, agent: DQNAgent, states: np.ndarray, masks: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """One action per state (one forward pass), and the Q rows they came from (``None`` for
        the ablation). A slot's candidates come from similar parents, so greedy agents would give
        nearly all of them the same move and leave the screen nothing to choose from: candidate i
        exploits its i-th best valid action instead, so the screen sees the top of the ranking."""
        if self.action_policy == "random":
            return np.array([self.rng.choice(np.flatnonzero(m)) for m in masks], np.int64), None
        ranks = np.arange(len(states)) % np.maximum(masks.sum(axis=1), 1)
        return agent.act_batch(states, masks, ranks if len(states) > 1 else None)

    def _redraw(self, knob: list[int], i: int, move: str | int, exclude: set[int] = frozenset()) -> int | None:
        """A new value for knob ``i``: a step in direction ``DIRECTIONS[move]`` (none once used
        up), or any other value ("redraw", AutoTVM's mutation)."""
        if isinstance(move, int):
            options = [v for v in self.space.knobs[i].direction_steps(knob[i], move) if v not in exclude]
        else:
            options = [v for v in range(self.dims[i]) if v != knob[i] and v not in exclude]
        return int(options[int(self.rng.integers(len(options)))]) if options else None

    # -- the breeder
    def crossover(self, pairs: list[tuple[Member, Member]]) -> list[Member]:
        """The crossover agent picks each pair's cut point, all pairs in one forward pass."""
        children = [Member(list(p1.knob), -1, None, {"parent_best": max(p1.score or 0.0, p2.score or 0.0)})
                    for p1, p2 in pairs]
        if self.n_knobs > 1:
            states = self.crossover_states(pairs)
            masks = np.repeat(self.crossover_mask()[None], len(pairs), axis=0)
            actions, _ = self._choose(self.crossover_agent, states, masks)
            for child, (p1, p2), state, action in zip(children, pairs, states, actions):
                child.knob = p1.knob[: action + 1] + p2.knob[action + 1:]
                child.info["crossover"] = (state, int(action))
        return children

    def mutate(self, children: list[Member], taken: set[int]) -> None:
        """The mutation agent picks each child's knob and move, all children in one forward pass
        ("keep" only where the crossover child is new)."""
        knobs = [child.knob for child in children]
        states = self.mutation_states(knobs)
        masks = self.mutation_masks([self.space.knob2point(knob) not in taken for knob in knobs], knobs)
        actions, q = self._choose(self.mutation_agent, states, masks)
        for n, (child, action) in enumerate(zip(children, actions)):
            child.info["mutation"] = (states[n], int(action), masks[n])
            child.info["mutation_q"] = None if q is None else q[n]
            knob_i, move = self.decode_mutation(int(action))
            if knob_i is not None and knob_i < self.n_knobs and self.dims[knob_i] > 1:
                value = self._redraw(child.knob, knob_i, move)
                child.knob[knob_i] = child.knob[knob_i] if value is None else value

    def repair(self, child: Member, taken: set[int]) -> Member | None:
        """Mutate the chosen knob again, then try other actions in the agent's order of
        preference, until the child is one not taken; the action that made it is recorded."""
        info = child.info
        if not info or "mutation" not in info:
            return super().repair(child, taken)
        state, first, mask = info["mutation"]
        order = ([first] if first != self.keep_action else []) + self._action_preference(info.get("mutation_q"), first,
                                                                                          child.knob)
        for action in order:
            i, move = self.decode_mutation(action)
            tried: set[int] = set()
            candidate = list(child.knob)
            while (value := self._redraw(child.knob, i, move, tried)) is not None:
                tried.add(value)
                candidate[i] = value
                point = self.space.knob2point(candidate)
                if point not in taken:
                    return Member(candidate, point, None, dict(info, mutation=(state, action, mask)))
        return None

    def _action_preference(self, q: np.ndarray | None, exclude: int, knob: list[int]) -> list[int]:
        """Valid mutation actions from ``knob`` other than ``exclude`` and "keep", best first by
        the Q row the child was bred with (a random order for the ablation)."""
        mask = self.mutation_masks([False], [knob])[0]
        valid = [int(a) for a in np.flatnonzero(mask) if a not in (exclude, self.keep_action)]
        if q is None:
            return [int(a) for a in self.rng.permutation(valid)]
        return sorted(valid, key=lambda a: -q[a])

    # -- rewards and learning
    def reward(self, flops: float, best_before: float, parent_best: float) -> float:
        """The reward of a measured child, scaled by the best so far.

        - "improvement" (default): how much the child beats its better parent, >= 0, capped;
          a failed child gets ``-FAILURE_PENALTY``. It pays for the move that made progress.
        - "score": the child's FLOP/s over the best so far, capped; failures ``-FAILURE_PENALTY``.
        - "r1", "r2", "r3": the original study's functions: initial mean minus score; score if it
          beats the best else 0; 5x score if best, score if above the previous generation's
          mean, 0 if equal, minus score otherwise.
        """
        scale = best_before if best_before > 0 else max(flops, 1.0)
        score = flops / scale
        failed = flops == 0.0
        if self.reward_name == "improvement":
            return -FAILURE_PENALTY if failed else min(max(flops - parent_best, 0.0) / scale, REWARD_CAP)
        if self.reward_name == "score":
            return -FAILURE_PENALTY if failed else min(score, REWARD_CAP)
        if self.reward_name == "r1":
            return (self.generation_means[0] if self.generation_means else 0.0) / scale - score
        if self.reward_name == "r2":
            return score if flops > best_before else 0.0
        if flops > best_before:
            return 5 * score
        last_mean = self.generation_means[-1] if self.generation_means else 0.0
        if flops > last_mean:
            return score
        return 0.0 if flops == last_mean else -score

    def learn(self, member: Member, flops: float, best_before: float) -> None:
        """Reward both agents for the child they made (immigrants, which no agent made, have no info)."""
        if not member.info:
            return
        r = self.reward(flops, best_before, member.info["parent_best"])
        crossover_action = member.info.get("crossover", (None, None))[1]
        state, action, mask = member.info["mutation"]
        row = {"trial": len(self.history), "generation": self.generation, "reward": r,
               "crossover_action": crossover_action, "mutation_action": action,
               "crossover_loss": None, "mutation_loss": None,
               "epsilon": self.mutation_agent.epsilon if self.action_policy == "dqn" else None,
               "gflops": flops / 1e9, "best_gflops": self.best_flops / 1e9,
               "mean_gflops": float(np.mean(list(self.scores.values()))) / 1e9}
        if self.action_policy == "dqn":
            if crossover_action is not None:
                cstate = member.info["crossover"][0]
                row["crossover_loss"] = self.crossover_agent.observe(cstate, crossover_action, r, cstate,
                                                                     self.crossover_mask(), True)
            next_state = self.mutation_states([member.knob])[0]
            row["mutation_loss"] = self.mutation_agent.observe(state, action, r, next_state, mask,
                                                               self.mutation_agent.config.gamma == 0)
        row["mutated_knob"], move = self.decode_mutation(action)
        row["mutation_move"] = str(DIRECTIONS[move]) if isinstance(move, int) else move
        self.monitor.append(row)

    # -- checkpoints
    def save(self, path: str) -> None:
        """Store both agents and the action layout they were trained with."""
        folder = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(folder):
            raise AutoTVMError(f"cannot save the agents to {path!r}: folder {folder!r} does not exist")
        torch.save({"format": CHECKPOINT_FORMAT, "crossover": self.crossover_agent.state_dict(),
                    "mutation": self.mutation_agent.state_dict(), "max_knobs": self.max_knobs,
                    "moves": self.moves}, path)

    def load(self, path: str) -> None:
        """Restore both agents from ``save``; states are padded/masked to this task's knob count."""
        if not os.path.isfile(path):
            raise AutoTVMError(f"checkpoint {path!r} does not exist; save one with GADQNTuner.save(path)")
        data = torch.load(path, map_location="cpu", weights_only=False)
        if not isinstance(data, dict) or data.get("format") != CHECKPOINT_FORMAT:
            raise AutoTVMError(f"checkpoint {path!r} was saved by another version of GADQNTuner (format "
                             f"{data.get('format') if isinstance(data, dict) else None}, this one reads "
                             f"{CHECKPOINT_FORMAT}); train the agents again and save them")
        self.max_knobs = int(data["max_knobs"])
        self.moves = tuple(data["moves"])
        self._move_mask = None
        seed = None if self.seed is None else int(self.seed)
        self.crossover_agent = DQNAgent.from_state_dict(data["crossover"], seed)
        self.mutation_agent = DQNAgent.from_state_dict(data["mutation"], None if seed is None else seed + 1)
