"""A small deep Q-network agent in plain PyTorch (read it top to bottom, CleanRL style).

Knows nothing of TVM (autotvm's option checks aside): states are float vectors, actions are ints, invalid actions are masked.
MLP Q-network, replay buffer, target network, epsilon-greedy with linear decay, Huber loss, optional double
DQN, configurable gamma, a training step every ``train_every`` transitions after
``learning_starts`` transitions.

Epsilon decays with the transitions observed (CleanRL's ``global_step``: steps taken in the
environment), not with the actions computed: a caller that scores many candidate states before
one of them is carried out (``act_batch``) must not use up its exploration on the discarded ones.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import asdict, dataclass, fields
from typing import Iterator

import numpy as np
import torch
from torch import nn

from autotvm.checks import AutoTVMError, check_options, flag, integer, integers, number, text


@dataclass
class DQNConfig:
    """Hyper-parameters of one agent, saved with it. A tuning run gives the agents a few hundred
    transitions, so they learn fast and explore early."""

    hidden: tuple[int, ...] = (64, 64)
    """widths of the Q-network's hidden layers"""
    lr: float = 3e-3
    """Adam's learning rate"""
    gamma: float = 0.0
    """discount: choosing a cut point or a move is close to a contextual bandit (0.5 measured worse)"""
    buffer_size: int = 5000
    """transitions kept in the replay buffer (more than a run makes)"""
    batch_size: int = 32
    """transitions per gradient step"""
    train_every: int = 2
    """a gradient step every this many transitions (halves the training time; learning holds)"""
    learning_starts: int = 16
    """transitions before the first gradient step"""
    target_update: int = 50
    """gradient steps between target-network syncs"""
    eps_start: float = 1.0
    """exploration rate at the first transition"""
    eps_end: float = 0.05
    """exploration rate after ``eps_decay_steps`` transitions"""
    eps_decay_steps: int = 100
    """transitions over which epsilon decays linearly"""
    double_dqn: bool = True
    """pick the next action with the online network, value it with the target network"""
    q_init: float = 0.0
    """initial Q of every action; with several hundred moves and ~190 children a run, optimism
    (> 0) would keep the agent trying untried moves for the whole run"""
    grad_clip: float = 10.0
    """largest gradient norm of a step"""
    device: str = "cpu"
    """torch device of the networks"""
    num_threads: int = 1
    """CPU threads for the networks: they are tiny, and more threads only add synchronisation"""

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> DQNConfig:
        """A config from plain data (a user's JSON, a saved agent), each field checked by its rule in
        ``RULES``. A misspelt key would otherwise be a ``TypeError`` deep in a run, or, if ignored, a
        setting silently not applied."""
        allowed = [f.name for f in fields(cls)]
        unknown = sorted(set(values) - set(allowed))
        if unknown:
            raise AutoTVMError(f"unknown DQN option {unknown[0]!r}; allowed: {', '.join(allowed)}")
        check_options(cls.RULES, values, prefix="DQN option ")
        if "hidden" in values:
            values = {**values, "hidden": tuple(values["hidden"])}
        return cls(**values)


# the rule each field keeps (``autotvm.checks``), for ``from_dict`` and the driver's config schema
DQNConfig.RULES = {
    "hidden": integers(1), "lr": number(0), "gamma": number(0, 1), "buffer_size": integer(1),
    "batch_size": integer(1), "train_every": integer(1), "learning_starts": integer(0), "target_update": integer(1),
    "eps_start": number(0, 1), "eps_end": number(0, 1), "eps_decay_steps": integer(1), "double_dqn": flag(),
    "q_init": number(0), "grad_clip": number(0), "device": text(), "num_threads": integer(1),
}


def _mlp(widths: list[int]) -> nn.Sequential:
    """Linear + ReLU layers through ``widths``."""
    return nn.Sequential(*[layer for w_in, w_out in zip(widths, widths[1:]) for layer in (nn.Linear(w_in, w_out), nn.ReLU())])


def _head(width: int, n_out: int, q_init: float) -> nn.Linear:
    """An output layer that starts at Q = ``q_init`` everywhere: rewards are small, and random
    initial values would drown the differences between actions that the first few rewards reveal."""
    head = nn.Linear(width, n_out)
    nn.init.zeros_(head.weight)
    nn.init.constant_(head.bias, q_init)
    return head


class QNetwork(nn.Module):
    """A plain MLP with one output per action."""

    def __init__(self, state_dim: int, n_actions: int, hidden: tuple[int, ...], q_init: float = 0.0) -> None:
        super().__init__()
        self.net = nn.Sequential(_mlp([state_dim, *hidden]), _head(hidden[-1] if hidden else state_dim, n_actions, q_init))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class ReplayBuffer:
    """A circular buffer of (state, action, reward, next_state, next_mask, done)."""

    def __init__(self, size: int, state_dim: int, n_actions: int) -> None:
        self.size, self.pos, self.full = size, 0, False
        self.states = np.zeros((size, state_dim), np.float32)
        self.next_states = np.zeros((size, state_dim), np.float32)
        self.next_masks = np.ones((size, n_actions), bool)
        self.actions = np.zeros(size, np.int64)
        self.rewards = np.zeros(size, np.float32)
        self.dones = np.zeros(size, np.float32)

    def __len__(self) -> int:
        return self.size if self.full else self.pos

    def add(self, state, action, reward, next_state, next_mask, done) -> None:
        i = self.pos
        self.states[i], self.actions[i], self.rewards[i] = state, action, reward
        self.next_states[i], self.next_masks[i], self.dones[i] = next_state, next_mask, float(done)
        self.pos = (self.pos + 1) % self.size
        self.full = self.full or self.pos == 0

    def sample(self, batch_size: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
        """A random batch that always contains the newest transition."""
        n = len(self)
        idx = rng.integers(0, n, size=min(batch_size, n))
        idx[0] = (self.pos - 1) % self.size
        return {"states": self.states[idx], "actions": self.actions[idx], "rewards": self.rewards[idx],
                "next_states": self.next_states[idx], "next_masks": self.next_masks[idx], "dones": self.dones[idx]}


_TORCH_THREADS = threading.RLock()


class DQNAgent:
    """Epsilon-greedy DQN over ``n_actions`` with per-state action masks."""

    def __init__(self, state_dim: int, n_actions: int, config: DQNConfig | None = None, seed: int | None = None) -> None:
        self.config = config or DQNConfig()
        self.state_dim, self.n_actions = state_dim, n_actions
        self.rng = np.random.default_rng(seed)
        if seed is not None:
            torch.manual_seed(seed)
        self.device = torch.device(self.config.device)
        self.q, self.target = self._network().to(self.device), self._network().to(self.device)
        self.target.load_state_dict(self.q.state_dict())
        # fused: one kernel for the whole update; on a network this small the per-tensor loop of
        # the default implementation is a quarter of a training step
        self.optimizer = torch.optim.Adam(self.q.parameters(), lr=self.config.lr, fused=True)
        self.buffer = ReplayBuffer(self.config.buffer_size, state_dim, n_actions)
        self.transitions = 0
        self.gradient_steps = 0
        self.training = True  # False: act greedily and never learn (a loaded agent used as is)

    def _network(self) -> nn.Module:
        return QNetwork(self.state_dim, self.n_actions, self.config.hidden, self.config.q_init)

    @contextlib.contextmanager
    def _threads(self) -> Iterator[None]:
        """Run torch with ``config.num_threads`` inside, restoring the caller's setting after. The
        setting is the process's: agents of tuners whose rounds run at once take turns."""
        with _TORCH_THREADS:
            before = torch.get_num_threads()
            torch.set_num_threads(self.config.num_threads)
            try:
                yield
            finally:
                torch.set_num_threads(before)

    @property
    def epsilon(self) -> float:
        if not self.training:
            return 0.0
        c = self.config
        frac = min(1.0, self.transitions / max(1, c.eps_decay_steps))
        return c.eps_start + frac * (c.eps_end - c.eps_start)

    def q_values(self, state: np.ndarray) -> np.ndarray:
        """Q of every action for one state (1-D) or for a batch of states (2-D), one forward pass."""
        with torch.no_grad(), self._threads():
            x = torch.as_tensor(np.asarray(state), dtype=torch.float32, device=self.device)
            return self.q(x.reshape(-1, self.state_dim)).cpu().numpy().reshape(*np.shape(state)[:-1], -1)

    def _greedy_from(self, q: np.ndarray, mask: np.ndarray, rank: int = 0) -> int:
        """The valid action of highest Q (``rank`` r > 0: the (r+1)-th highest, wrapping round
        the valid actions); ties (as between untried actions) broken at random."""
        mask = np.asarray(mask, bool)
        q = np.where(mask, q, -np.inf)
        if rank:
            jitter = self.rng.random(len(q)) * 1e-9  # random order among equal Q
            order = np.argsort(-(q + jitter), kind="stable")
            order = order[mask[order]]
            return int(order[rank % len(order)])
        best = np.flatnonzero(q >= q.max() - 1e-9)
        return int(best[0] if len(best) == 1 else self.rng.choice(best))

    def greedy_action(self, state: np.ndarray, mask: np.ndarray) -> int:
        return self._greedy_from(self.q_values(state), mask)

    def act(self, state: np.ndarray, mask: np.ndarray) -> int:
        """Epsilon-greedy over the valid actions (``mask``)."""
        return int(self.act_batch(np.asarray(state)[None], np.asarray(mask)[None])[0][0])

    def act_batch(self, states: np.ndarray, masks: np.ndarray,
                  ranks: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Epsilon-greedy actions for a batch of states (one forward pass), and their Q rows.
        ``ranks``: state i exploits its ``ranks[i]``-th best action instead of its best (0), so
        that a batch of similar states does not collapse onto one action."""
        eps = self.epsilon
        q = self.q_values(states)
        ranks = np.zeros(len(states), np.int64) if ranks is None else ranks
        actions = np.empty(len(states), np.int64)
        for i, (row, mask) in enumerate(zip(q, masks)):
            explore = self.rng.random() < eps
            actions[i] = self.rng.choice(np.flatnonzero(mask)) if explore else self._greedy_from(row, mask, int(ranks[i]))
        return actions, q

    def observe(self, state, action, reward, next_state, next_mask, done) -> float | None:
        """Store a transition; train when due. Returns the loss of the step taken, if any."""
        if not self.training:
            return None
        self.buffer.add(state, action, reward, next_state, next_mask, done)
        self.transitions += 1
        c = self.config
        if self.transitions < c.learning_starts or self.transitions % c.train_every:
            return None
        return self.train_step()

    def train_step(self) -> float:
        with self._threads():
            return self._train_step()

    def _train_step(self) -> float:
        c = self.config
        batch = {k: torch.as_tensor(v, device=self.device) for k, v in self.buffer.sample(c.batch_size, self.rng).items()}
        with torch.no_grad():
            if c.gamma > 0:
                masks = batch["next_masks"]
                target_q = self.target(batch["next_states"])
                if c.double_dqn:
                    online = self.q(batch["next_states"]).masked_fill(~masks, -1e9)
                    best = online.argmax(dim=1, keepdim=True)
                    next_value = target_q.gather(1, best).squeeze(1)
                else:
                    next_value = target_q.masked_fill(~masks, -1e9).max(dim=1).values
                td_target = batch["rewards"] + c.gamma * next_value * (1 - batch["dones"])
            else:
                td_target = batch["rewards"]
        q = self.q(batch["states"]).gather(1, batch["actions"].unsqueeze(1)).squeeze(1)
        loss = nn.functional.smooth_l1_loss(q, td_target)
        self.optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(self.q.parameters(), c.grad_clip)
        self.optimizer.step()
        self.gradient_steps += 1
        if self.gradient_steps % c.target_update == 0:
            self.target.load_state_dict(self.q.state_dict())
        return float(loss.item())

    def state_dict(self) -> dict:
        return {"config": self.config.to_dict(), "state_dim": self.state_dim, "n_actions": self.n_actions,
                "q": self.q.state_dict(), "target": self.target.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "transitions": self.transitions, "gradient_steps": self.gradient_steps}

    @classmethod
    def from_state_dict(cls, data: dict, seed: int | None = None) -> "DQNAgent":
        config = dict(data["config"])
        config["hidden"] = tuple(config["hidden"])
        agent = cls(data["state_dim"], data["n_actions"], DQNConfig.from_dict(config), seed=seed)
        agent.q.load_state_dict(data["q"])
        agent.target.load_state_dict(data["target"])
        agent.optimizer.load_state_dict(data["optimizer"])
        agent.transitions = data["transitions"]
        agent.gradient_steps = data["gradient_steps"]
        return agent
