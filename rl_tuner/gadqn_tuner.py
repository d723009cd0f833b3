"""``GADQNTuner``: an elitist GA whose crossover point and mutated knob are chosen by two DQNs.

- Crossover agent: state = both parents' normalised genes and normalised fitness; action = a
  cut point among the n-1 points. A one-knob task has no cut point and skips crossover.
- Mutation agent: state = the child's normalised genes (``stall_state=True`` adds its better
  parent's fitness and the stall, generations since the best improved: an experiment meant to
  let the agent learn to jump out of a stalled population; measured, it did worse than the
  plain state, see benchmarks/README.md); action = which knob to mutate and how,
  or "keep" (the last action), allowed only when the crossover child is new: measured on C1, a
  GA that always mutates explores too much for a 200-trial budget, and "keep" lets the agent
  learn when a pure crossover child is the better bet.
- How a knob is mutated (``mutation``): "local" takes a small step (a tile factor moved between
  two levels, the next unroll depth), as MetaSchedule's mutators do, so a child stays near a good
  parent; "redraw" is AutoTVM's uniform redraw, which can leave a bad region that small steps
  cannot; "mixed" gives the agent both moves for every knob (2n actions + keep), so it learns
  where to step and where to jump. "directed" (default) names the small step: for a split, the
  level a prime factor leaves and the level it joins (``autotvm.task.space.DIRECTIONS``: (0, 3)
  moves it from the outermost level to the innermost), for a numeric option down or up, plus a
  redraw per knob and "keep". The state adds every split's levels (log2 of each factor over
  log2 of the extent), the tile sizes a direction changes, which the gene (an index into a list
  of factorizations) does not show. The real ops' spaces have 5 to 9 knobs, so "mixed" offered
  11 to 19 moves and the screen's 16 candidates covered nearly all of them: the agents' ranking
  hardly mattered. A direction also means the same on every knob and every task ("make the
  inner tile longer"), which a saved agent carries to the next task. Measured on the real ops
  (benchmarks/README.md): 1.051 of "mixed" over six seeds (90% interval 0.955-1.121), and
  1.005 of its own ablation over fifteen (0.982-1.048): level, as "mixed" was (0.983).
- Each agent is trained on exactly the state it acted on, with the child's measured reward.
- ``action_policy="random"`` is the ablation: the same GA with uniform choices, no networks.
- ``screen`` (default 16): once the first generation is measured, each measured child is the one
  an XGBoost ranking model, refit every generation, prefers among 16 bred children (see
  ``PopulationTuner``). With 64 to 200 trials a GA has only a few generations; the model spends
  the cheap part (breeding) to save the expensive part (measuring). ``screen=1`` measures every
  child bred, as the first versions did. The agents learn from the child that was measured.
- ``spread`` (screen only): the candidates of a slot come from similar parents, so their states
  are alike, and greedy agents gave nearly all 16 the same move (2.5 distinct mutated knobs of
  10 on NK landscapes, against 8.3 for uniform choices): the model had almost nothing to choose
  from. With ``spread=s``, candidate i exploits its (i mod ceil(s x valid actions))-th best
  action: the agents rank the moves and the screen's candidates cover the top of the ranking
  (1.0, default: all of it, best first; 0.0: every candidate greedy, the sixth session's
  design). Measured (benchmarks/README.md): GA-DQN over its ablation rose from 0.981 to 1.006
  on NK landscapes (two seed sets of 16, two kinds of landscape); on the real ops it was 1.047
  with spread (4 seeds, one run), 1.004 and 0.968 without (4 and 8 seeds, other runs).
- ``restart_after`` (off by default): random newcomers after that many generations without a new
  best (see ``PopulationTuner``); they are not the agents' choices, so no transition is stored.
- ``immigrants`` (default 2 when screening, at most ``pop_size - elite_num - 1``): two slots of
  every generation after the first go to the screen model's pick of ``immigrant_pool`` (512)
  random unvisited configs (see ``PopulationTuner``), a global search beside the agents' local
  one. Measured (benchmarks/README.md): without them a population of 16 sometimes converged on
  a poor basin and stayed (C1 26 GFLOPS where other tuners reach 45; R3x3 54 and 63 where they
  reach 80); with them the worst of five seeds rose to 47 / 80 / 81 on C1 / MM512 / R3x3, and
  on four fresh seeds the medians were 1.017 of those without (within the noise; MM512, where
  breeding climbs well, lost a little). The immigrants are not the agents' choices, so no
  transition is stored for them.
- ``screen_scope`` ("slot", default): "generation" ranks one pool of ``screen`` children per slot
  at the start of each generation and measures its top (see ``PopulationTuner``). Measured on
  the real ops (benchmarks/README.md), 0.966 of "slot" on three fresh seeds, with more stalled
  R3x3 runs; kept as an option for comparing the two ways of screening.
- ``agent_weight`` (0.0, default: the screen model alone picks): the mutation agent's say in
  which of a slot's candidates is measured, a rank sum of the model's ranking and w times the
  ranking by the Q of each candidate's move. Measured (benchmarks/README.md), w = 1: 1.045 of
  the ablation on seeds 0-5 of C1 and R3x3, where it was chosen, but 0.954 on fresh seeds 6-11
  of every op; kept as an option, not the default. Why (``benchmarks/agent_signal.py``, every
  candidate of some slots measured): inside a slot the model ranks the candidates 2-5 times
  better than Q, so weight on Q helped R3x3 and hurt C1 and MM512.
- ``q_network`` ("flat", default): the mutation agent's network has one output per (move, knob),
  553 with directions, and a run gives it about 190 transitions, so most outputs never train.
  "per_knob" (``dqn.EntityQNetwork``) gives every knob a row of features (gene, split levels,
  size, kind, position) and scores each knob's moves with weights shared by all knobs, so every
  reward trains them all. Measured (benchmarks/README.md): it learns the synthetic tile rule on
  every seed where "flat" misses some, and its children beat their parents more often on the
  real ops (0.242 against 0.224 for the ablation), but the best found was level (1.007 of the
  ablation on six fresh seeds) and it costs a little more time; kept as an option.
- ``candidates`` ("children", default): each of a slot's 16 candidates is bred from its own
  parent pair, so the screen model chooses mostly among parents, and a candidate's move is one
  of many things that differ. "moves": one crossover child per slot, its candidates differing
  only in the mutation move, the agent's 16 best valid ones (up to 24 a knob: 23 directions
  and a redraw; the ablation: 16 distinct uniform ones), so that the agent's ranking alone
  decides what the model can choose from. Measured (benchmarks/README.md): 1.017 of its own ablation on six fresh seeds of the three
  ops (90% interval 0.872-1.084), level; kept as an option.
- ``screen_model`` ("rank", default): the screen's model (see ``PopulationTuner``). "reg" picks
  far better inside a slot (83-93% of the slot's best against 65-82%), but the best found was
  no higher (0.959 of "rank" on three fresh seeds) and still level with the ablation screened
  the same way (0.978): the agents' share does not show through a better pick either.

States and actions are padded to ``max_knobs`` (invalid actions masked), so a saved agent can
start on another task with a different knob count.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch

from autotvm.task.space import DIRECTIONS, MAX_LEVELS, SplitEntity
from autotvm.tuner.population import Member, PopulationTuner

from .dqn import DQNAgent, DQNConfig

REWARDS = ("improvement", "score", "r1", "r2", "r3")
MODES = ("train", "greedy", "continue")
POLICIES = ("dqn", "random")
Q_NETWORKS = ("flat", "per_knob")
CANDIDATES = ("children", "moves")
MUTATIONS = ("directed", "mixed", "local", "redraw")
# the moves of the mutation agent's actions, per ``mutation``: a direction is an index into DIRECTIONS
MOVES = {"directed": (*range(len(DIRECTIONS)), "redraw"), "mixed": ("local", "redraw")}
N_CONTEXT = 2  # features after the genes in the mutation agent's state
STALL_SCALE = 5.0  # generations without a new best at which the stall feature saturates


class GADQNTuner(PopulationTuner):
    def __init__(self, task: Any, pop_size: int = 16, elite_num: int = 3, reward: str = "improvement",
                 action_policy: str = "dqn", mutation: str = "directed", mode: str = "train", checkpoint: str | None = None,
                 max_knobs: int | None = None, dqn: DQNConfig | dict | None = None, failure_penalty: float = 0.1,
                 reward_cap: float = 2.0, stall_state: bool = False, screen: int = 16, spread: float = 1.0,
                 restart_after: int | None = None, immigrants: int | None = None, immigrant_pool: int = 512,
                 screen_scope: str = "slot", agent_weight: float = 0.0, q_network: str = "flat",
                 candidates: str = "children", screen_model: str = "rank", seed: int | None = None) -> None:
        for name, value, allowed in (("reward", reward, REWARDS), ("action_policy", action_policy, POLICIES),
                                     ("mode", mode, MODES), ("mutation", mutation, MUTATIONS),
                                     ("q_network", q_network, Q_NETWORKS), ("candidates", candidates, CANDIDATES)):
            if value not in allowed:
                raise ValueError(f"unknown {name} {value!r}; allowed: {', '.join(allowed)}")
        if mode != "train" and not checkpoint:
            raise ValueError(f"mode {mode!r} needs checkpoint=<path of a saved agent>")
        super().__init__(task, pop_size=pop_size, elite_num=elite_num, screen=screen, restart_after=restart_after,
                         immigrants=self.default_immigrants(pop_size, elite_num, screen) if immigrants is None else immigrants,
                         immigrant_pool=immigrant_pool, screen_scope=screen_scope, screen_model=screen_model, seed=seed)
        self.reward_name, self.action_policy, self.mode = reward, action_policy, mode
        self.candidates = candidates
        self.moves = MOVES.get(mutation, (mutation,))
        self.failure_penalty, self.reward_cap = failure_penalty, reward_cap
        if isinstance(spread, bool) or not isinstance(spread, (int, float)) or not 0.0 <= spread <= 1.0:
            raise ValueError(f"spread must be a number in [0, 1] (0: every screened candidate greedy), got {spread!r}")
        self.spread = spread
        if isinstance(agent_weight, bool) or not isinstance(agent_weight, (int, float)) or agent_weight < 0:
            raise ValueError(f"agent_weight must be a number >= 0 (0: the screen model alone picks), got {agent_weight!r}")
        self.agent_weight = float(agent_weight)
        self.n_knobs = len(self.dims)
        self.dims_arr = np.array(self.dims, dtype=np.float64)
        self.monitor: list[dict] = []
        self._move_mask: np.ndarray | None = None  # the valid moves of every child (mutation_masks)
        self.initial_mean: float | None = None
        self.prev_generation_mean = 0.0
        self._best_seen = self._best_before = 0.0
        agent_seed = None if seed is None else int(seed)
        if checkpoint and mode != "train":
            self.load(checkpoint)
            if mode == "greedy":
                self.crossover_agent.training = self.mutation_agent.training = False
        else:
            self.max_knobs = max(self.n_knobs, max_knobs or 24)
            config = dqn if isinstance(dqn, DQNConfig) else DQNConfig.from_dict(self.default_dqn(mutation) | (dqn or {}))
            self.crossover_agent = DQNAgent(2 * self.max_knobs + 2, max(self.max_knobs - 1, 1), config, agent_seed)
            if q_network == "per_knob":
                config = DQNConfig(**(config.to_dict() | {"entities": self.max_knobs, "entity_dim": self.knob_row_dim}))
            state_dim = self._knob_features_dim(config.entities > 0) + (N_CONTEXT if stall_state else 0)
            self.mutation_agent = DQNAgent(state_dim, len(self.moves) * self.max_knobs + 1, config,
                                           None if agent_seed is None else agent_seed + 1)
        if self.n_knobs > self.max_knobs:
            raise ValueError(f"the task has {self.n_knobs} knobs but the agent handles at most {self.max_knobs}")
        self._level_tables = [self._level_table(knob) for knob in self.space.knobs]
        self._knob_constants = self._knob_constant_rows() if self.per_knob else None

    @staticmethod
    def default_dqn(mutation: str) -> dict:
        """DQN settings that depend on the action design. With directions there are several
        hundred actions and a run measures about 190 children, so optimistic initial values
        (``q_init`` 0.1, which make every action be tried before any is exploited) would keep
        the agent exploring for the whole run: untried directions start at 0, level with the
        moves that never improved a child."""
        return {"q_init": 0.0} if mutation == "directed" else {}

    @staticmethod
    def default_immigrants(pop_size: int, elite_num: int, screen: int) -> int:
        """Two model-picked immigrants a generation when screening (none without a model), and
        always at least one bred child."""
        return 0 if screen == 1 else max(0, min(2, pop_size - elite_num - 1))

    # -- states and masks
    def _genes(self, knobs: np.ndarray | list) -> np.ndarray:
        """Knob indices scaled to [0, 1], zero-padded to ``max_knobs`` (one knob vector, or rows of them)."""
        knobs = np.asarray(knobs, dtype=np.float64)
        out = np.zeros(knobs.shape[:-1] + (self.max_knobs,), np.float32)
        out[..., : self.n_knobs] = knobs / np.maximum(self.dims_arr - 1, 1)
        return out

    @property
    def directed(self) -> bool:
        """Whether mutation actions are named directions (``mutation="directed"``)."""
        return isinstance(self.moves[0], int)

    @property
    def n_level_features(self) -> int:
        """State features after the genes for "directed": every knob's split levels."""
        return self.max_knobs * MAX_LEVELS if self.directed else 0

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

    @property
    def knob_row_dim(self) -> int:
        """Features of one knob's row in the "per_knob" state: its gene, its split levels, four
        constants (whether it can change, log2 of its value count and of its split extent over 16,
        whether it is a split) and its position (one-hot over ``max_knobs``)."""
        return 1 + MAX_LEVELS + 4 + self.max_knobs

    def _knob_features_dim(self, per_knob: bool) -> int:
        """State features before the context: a row per knob ("per_knob"), or the genes and,
        with directions, every knob's split levels ("flat")."""
        return self.max_knobs * self.knob_row_dim if per_knob else self.max_knobs + self.n_level_features

    @property
    def per_knob(self) -> bool:
        """Whether the mutation agent's network scores every knob's moves with shared weights
        (``q_network="per_knob"``; a loaded agent keeps the network it was trained with)."""
        return self.mutation_agent.config.entities > 0

    def _knob_rows(self, children: list[list[int]]) -> np.ndarray:
        """The "per_knob" state of each child: ``max_knobs`` rows (padding rows all zero) of
        ``knob_row_dim`` features, flattened."""
        n = len(children)
        genes = self._genes(children)[:, :, None]
        levels = self._levels(children).reshape(n, self.max_knobs, MAX_LEVELS)
        return np.concatenate([genes, levels, np.repeat(self._knob_constants[None], n, axis=0)], axis=2).reshape(n, -1)

    def _knob_constant_rows(self) -> np.ndarray:
        """The features of ``_knob_rows`` that do not change with the child (zero for padding)."""
        constants = np.zeros((self.max_knobs, 4 + self.max_knobs), np.float32)
        for i, knob in enumerate(self.space.knobs):
            split = knob.kind == "sp"
            extent = float(np.prod(knob.entities[0].size)) if split else 1.0
            constants[i, :4] = (self.dims[i] > 1, np.log2(self.dims[i]) / 16, np.log2(extent) / 16, split)
            constants[i, 4 + i] = 1.0
        return constants

    def _fitness(self, score: float | None) -> float:
        return float(score or 0.0) / self.best_flops if self.best_flops > 0 else 0.0

    def mutation_state(self, child: list[int], parent_fitness: float, stalled_generations: int) -> np.ndarray:
        """The child's genes, then the context: its better parent's fitness (over the best so far)
        and the stall (generations since the best improved, saturating at ``STALL_SCALE``)."""
        return self._mutation_states([child], [parent_fitness], stalled_generations)[0]

    def _mutation_states(self, children: list[list[int]], parent_fitness: list[float],
                         stalled_generations: int) -> np.ndarray:
        context = np.zeros((len(children), N_CONTEXT), np.float32)
        context[:, 0], context[:, 1] = parent_fitness, min(stalled_generations / STALL_SCALE, 1.0)
        if self.per_knob:
            parts = [self._knob_rows(children)]
        else:
            parts = [self._genes(children)] + ([self._levels(children)] if self.directed else [])
        return np.concatenate(parts + [context[:, : self.n_context]], axis=1)

    @property
    def n_context(self) -> int:
        """Context features after the genes in the mutation agent's state (0 unless ``stall_state``;
        a loaded agent keeps the layout it was trained with)."""
        return self.mutation_agent.state_dim - self._knob_features_dim(self.per_knob)

    def crossover_state(self, p1: Member, p2: Member) -> np.ndarray:
        return self._crossover_states([(p1, p2)])[0]

    def _crossover_states(self, pairs: list[tuple[Member, Member]]) -> np.ndarray:
        fitness = np.array([[self._fitness(p1.score), self._fitness(p2.score)] for p1, p2 in pairs], np.float32)
        return np.concatenate([self._genes([p1.knob for p1, _ in pairs]), self._genes([p2.knob for _, p2 in pairs]),
                               fitness], axis=1)

    def crossover_mask(self) -> np.ndarray:
        mask = np.zeros(self.crossover_agent.n_actions, bool)
        mask[: max(self.n_knobs - 1, 0)] = True  # action a cuts before knob a+1
        return mask

    def mutation_mask(self, keep_allowed: bool = False, knob: list[int] | None = None) -> np.ndarray:
        """Every move on knobs with more than one value, plus "keep" (last) when the unmutated
        child is new. Action ``m * max_knobs + i`` is move ``self.moves[m]`` on knob ``i``.
        With directions, ``knob`` (the child) leaves out those with no step from its values."""
        return self.mutation_masks([keep_allowed], None if knob is None else [knob])[0]

    def mutation_masks(self, keep_allowed: list[bool], children: list[list[int]] | None = None) -> np.ndarray:
        """``mutation_mask`` of many children at once (one row each): the screen breeds 16
        children per measured one, so building their masks one by one cost a visible share of
        GA-DQN's own time."""
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

    def decode_mutation(self, action: int) -> tuple[int | None, str | None]:
        """(knob, move) of a mutation action; (None, None) for "keep"."""
        if action == self.keep_action:
            return None, None
        return action % self.max_knobs, self.moves[action // self.max_knobs]

    # -- choices: the networks, or the uniform ablation
    def _choose(self, agent: DQNAgent, states: np.ndarray, masks: np.ndarray,
                group: int = 1) -> tuple[np.ndarray, np.ndarray | None]:
        """One action per state (a batch, one forward pass), and the Q rows they came from
        (``None`` for the ablation's uniform choices). ``group`` > 1: runs of that many states
        are one child's (``candidates="moves"``), and each run takes distinct actions, the
        agent's best ones in order (with ``spread``) or, for the ablation, distinct uniform ones."""
        if self.action_policy == "random":
            if group > 1:
                return self._distinct_uniform(masks, group), None
            return np.array([self.rng.choice(np.flatnonzero(m)) for m in masks], np.int64), None
        ranks = None
        if self.spread > 0 and len(states) > 1:
            width = np.maximum(np.ceil(self.spread * masks.sum(axis=1)).astype(np.int64), 1)
            ranks = (np.arange(len(states)) % group if group > 1 else np.arange(len(states))) % width
        actions, q = agent.act_batch(states, masks, ranks)
        return (self._distinct_in_groups(actions, q, masks, group) if group > 1 else actions), q

    @staticmethod
    def _distinct_in_groups(actions: np.ndarray, q: np.ndarray, masks: np.ndarray, group: int) -> np.ndarray:
        """An exploring pick can land on a move another candidate of the same child took: it
        becomes the best-Q valid move not yet taken in its run (kept when there is none)."""
        actions = actions.copy()
        for start in range(0, len(actions), group):
            used: set[int] = set()
            for n in range(start, min(start + group, len(actions))):
                if actions[n] in used:
                    free = [a for a in np.argsort(-q[n], kind="stable") if masks[n][a] and a not in used]
                    actions[n] = free[0] if free else actions[n]
                used.add(int(actions[n]))
        return actions

    def _distinct_uniform(self, masks: np.ndarray, group: int) -> np.ndarray:
        """Uniform actions, distinct within each run of ``group`` rows (cycling when a run is
        longer than its valid actions): the ablation of an agent's top moves for one child."""
        actions = np.empty(len(masks), np.int64)
        for start in range(0, len(masks), group):
            order = self.rng.permutation(np.flatnonzero(masks[start]))
            stop = min(start + group, len(masks))
            actions[start:stop] = order[np.arange(stop - start) % len(order)]
        return actions

    def _model_pick(self, members: list[Member]) -> Member:
        """The screen's pick among a slot's candidates. With ``agent_weight`` w > 0 the mutation
        agent has a say: each candidate's rank by the model plus w times its rank by the Q of
        the move that made it (the agent's estimate of how much that move beats the parent).
        Random newcomers, which no agent made, are the model's pick alone."""
        if (self.agent_weight == 0 or self.screen_model is None or len(members) == 1
                or not all(m.info and m.info.get("mutation_q") is not None for m in members)):
            return super()._model_pick(members)
        q = np.array([m.info["mutation_q"][m.info["mutation"][1]] for m in members])
        ranks = [np.argsort(np.argsort(x, kind="stable"), kind="stable") for x in (self._predicted(members), q)]
        return members[int(np.argmax(ranks[0] + self.agent_weight * ranks[1]))]

    def _redraw(self, knob: list[int], i: int, move: str | int, exclude: set[int] = frozenset()) -> int | None:
        """A new value for knob ``i``: a small step from the current one ("local"; any value once
        the steps are used up), a step in direction ``DIRECTIONS[move]`` (none once used up) or
        any other value ("redraw", AutoTVM's mutation)."""
        options: list[int] = []
        if isinstance(move, int):
            options = [v for v in self.space.knobs[i].direction_steps(knob[i], move) if v not in exclude]
            return int(options[int(self.rng.integers(len(options)))]) if options else None
        if move == "local":
            options = [v for v in self.space.knobs[i].neighbours(knob[i]) if v not in exclude]
        if not options:
            options = [v for v in range(self.dims[i]) if v != knob[i] and v not in exclude]
        return int(options[int(self.rng.integers(len(options)))]) if options else None

    def breed(self, parents: list[Member], probs: np.ndarray, taken: set[int]) -> tuple[list[int], Any]:
        return self.breed_batch(parents, probs, taken, 1)[0]

    def breed_batch(self, parents: list[Member], probs: np.ndarray, taken: set[int],
                    count: int) -> list[tuple[list[int], Any]]:
        """``count`` children: each agent scores all of its states in one forward pass (the
        screen breeds 16 per measured trial, so acting one state at a time was most of the
        tuner's own time)."""
        group = min(self.screen, count) if self.candidates == "moves" else 1
        pairs = self.select_parent_pairs(parents, probs, -(-count // group))
        infos: list[dict] = [{"parent_best": max(p1.score or 0.0, p2.score or 0.0)} for p1, p2 in pairs]
        if self.n_knobs > 1:
            states = self._crossover_states(pairs)
            masks = np.repeat(self.crossover_mask()[None], len(pairs), axis=0)
            actions, _ = self._choose(self.crossover_agent, states, masks)
            children = [p1.knob[: a + 1] + p2.knob[a + 1:] for (p1, p2), a in zip(pairs, actions)]  # a cuts before a+1
            for info, state, action in zip(infos, states, actions):
                info["crossover"] = (state, int(action))
        else:
            children = [list(p1.knob) for p1, _ in pairs]
        if group > 1:  # each crossover child is the start of ``group`` candidates that differ in their move
            children = [list(children[n // group]) for n in range(count)]
            infos = [dict(infos[n // group]) for n in range(count)]
        states = self._mutation_states(children, [self._fitness(info["parent_best"]) for info in infos],
                                       self.stalled_generations)
        masks = self.mutation_masks([self.space.knob2point(child) not in taken for child in children], children)
        actions, q = self._choose(self.mutation_agent, states, masks, group)
        for n, (child, info, action) in enumerate(zip(children, infos, actions)):
            info["mutation"] = (states[n], int(action), masks[n])
            info["mutation_q"] = None if q is None else q[n]
            knob_i, move = self.decode_mutation(int(action))
            if knob_i is not None and knob_i < self.n_knobs and self.dims[knob_i] > 1:
                value = self._redraw(child, knob_i, move)
                child[knob_i] = child[knob_i] if value is None else value
        return list(zip(children, infos))

    def repair(self, knob: list[int], info: Any, taken: set[int]) -> tuple[list[int], Any] | None:
        """Mutate the chosen knob again, then try other actions in the agent's order of
        preference, until the child is one not visited; the action that made it is recorded."""
        if not info or "mutation" not in info:
            return super().repair(knob, info, taken)
        state, first, mask = info["mutation"]
        order = ([first] if first != self.keep_action else []) + self._action_preference(info.get("mutation_q"), first,
                                                                                          knob)
        for action in order:
            i, move = self.decode_mutation(action)
            tried: set[int] = set()
            candidate = list(knob)
            while (value := self._redraw(knob, i, move, tried)) is not None:
                tried.add(value)
                candidate[i] = value
                if self.space.knob2point(candidate) not in taken:
                    info = dict(info, mutation=(state, action, mask))
                    return candidate, info
        return None

    def _action_preference(self, q: np.ndarray | None, exclude: int, knob: list[int]) -> list[int]:
        """Valid mutation actions from ``knob`` other than ``exclude`` and "keep", best first by
        the Q row the child was bred with (a random order for the ablation)."""
        valid = [int(a) for a in np.flatnonzero(self.mutation_mask(knob=knob)) if a not in (exclude, self.keep_action)]
        if q is None:
            return [int(a) for a in self.rng.permutation(valid)]
        return sorted(valid, key=lambda a: -q[a])

    # -- rewards and learning
    def reward(self, flops: float, best_before: float, parent_best: float) -> float:
        """The selected reward of a measured child; every variant is scaled by the best so far.

        - "improvement" (default): how much the child beats its better parent, >= 0, capped;
          a failed child gets ``-failure_penalty``. Rewards choices that make progress.
        - "score": the child's FLOPS over the best so far, capped; failures ``-failure_penalty``.
        - "r1", "r2", "r3": the earlier prototype's functions, kept for the reward experiment:
          initial mean minus score; score if it beats the best else 0; 5x score if best, score if
          above the previous generation's mean, 0 if equal, minus score otherwise.

        Measured on the real ops (benchmarks/README.md, "The reward functions and a discount on
        the real ops"): none of the others beats the random-action ablation, and "improvement"
        is the one that pays for the move that made a child better.
        """
        scale = best_before if best_before > 0 else max(flops, 1.0)
        score = flops / scale
        failed = flops == 0.0
        if self.reward_name == "improvement":
            return -self.failure_penalty if failed else min(max(flops - parent_best, 0.0) / scale, self.reward_cap)
        if self.reward_name == "score":
            return -self.failure_penalty if failed else min(score, self.reward_cap)
        if self.reward_name == "r1":
            return (self.initial_mean or 0.0) / scale - score
        if self.reward_name == "r2":
            return score if flops > best_before else 0.0
        if flops > best_before:
            return 5 * score
        if flops > self.prev_generation_mean:
            return score
        return 0.0 if flops == self.prev_generation_mean else -score

    def on_generation(self) -> None:
        scores = [m.score for m in self.parents if m.score is not None]
        self.prev_generation_mean = float(np.mean(scores)) if scores else 0.0
        if self.initial_mean is None:
            self.initial_mean = self.prev_generation_mean

    def update(self, inputs, results) -> None:
        """Children of one batch are all rewarded against the best known before the batch."""
        self._best_before = self._best_seen
        super().update(inputs, results)
        self._best_seen = max([self._best_seen] + [self.flops_of(r) for r in results])

    def learn_history(self, inputs, results) -> None:
        super().learn_history(inputs, results)
        self._best_seen = max([self._best_seen] + [self.flops_of(r) for r in results])

    def on_measured(self, member: Member, flops: float) -> None:
        if not member.info:
            return
        r = self.reward(flops, self._best_before, member.info["parent_best"])
        row = {"trial": len(self.history), "generation": self.generation, "reward": r,
               "crossover_action": None, "mutation_action": None, "mutated_knob": None, "mutation_move": None,
               "crossover_loss": None, "mutation_loss": None,
               "epsilon": self.mutation_agent.epsilon if self.action_policy == "dqn" else None,
               "stalled_generations": self.stalled_generations, "gflops": flops / 1e9, "best_gflops": self.best_flops / 1e9,
               "mean_gflops": float(np.mean([s for s in self.scores.values()])) / 1e9}
        if self.action_policy == "dqn":
            if "crossover" in member.info:
                state, action = member.info["crossover"]
                row["crossover_loss"] = self.crossover_agent.observe(state, action, r, state, self.crossover_mask(), True)
                row["crossover_action"] = action
            state, action, mask = member.info["mutation"]
            next_state = self.mutation_state(member.knob, self._fitness(max(flops, member.info["parent_best"])),
                                             self.stalled_generations)
            row["mutation_loss"] = self.mutation_agent.observe(state, action, r, next_state, mask,
                                                               self.mutation_agent.config.gamma == 0)
            row["mutation_action"] = action
        else:
            row["crossover_action"] = member.info.get("crossover", (None, None))[1]
            row["mutation_action"] = member.info["mutation"][1]
        row["mutated_knob"], move = self.decode_mutation(member.info["mutation"][1])
        row["mutation_move"] = str(DIRECTIONS[move]) if isinstance(move, int) else move
        self.monitor.append(row)

    def greedy_mutation_action(self, knob: list[int], keep_allowed: bool = False, parent_fitness: float = 1.0,
                               stalled_generations: int = 0) -> int:
        """The action the mutation network prefers for a child (no exploration) in the given context."""
        state = self.mutation_state(knob, parent_fitness, stalled_generations)
        return self.mutation_agent.greedy_action(state, self.mutation_mask(keep_allowed, knob))

    def greedy_crossover_action(self, p1_knob, p2_knob, f1=0.0, f2=0.0) -> int:
        state = self.crossover_state(Member(list(p1_knob), 0, f1 * self.best_flops), Member(list(p2_knob), 0, f2 * self.best_flops))
        return self.crossover_agent.greedy_action(state, self.crossover_mask())

    # -- checkpoints
    def save(self, path: str) -> None:
        """Store both agents, their hyperparameters and this tuner's settings."""
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        torch.save({"crossover": self.crossover_agent.state_dict(), "mutation": self.mutation_agent.state_dict(),
                    "max_knobs": self.max_knobs, "moves": self.moves, "reward": self.reward_name,
                    "pop_size": self.pop_size,
                    "elite_num": self.elite_num}, path)

    def load(self, path: str) -> None:
        """Restore both agents from ``save``; states are padded/masked to this task's knob count."""
        if not os.path.isfile(path):
            raise ValueError(f"checkpoint {path!r} does not exist; save one with GADQNTuner.save(path)")
        data = torch.load(path, map_location="cpu", weights_only=False)
        self.max_knobs = int(data["max_knobs"])
        self.moves = tuple(data.get("moves", ("local",)))  # the action layout the agent was trained on
        self._move_mask = None
        seed = None if self.seed is None else int(self.seed)
        self.crossover_agent = DQNAgent.from_state_dict(data["crossover"], seed)
        self.mutation_agent = DQNAgent.from_state_dict(data["mutation"], None if seed is None else seed + 1)
