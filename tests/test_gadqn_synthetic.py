"""GA and GA-DQN search logic on synthetic objectives (no builds): learning, budget, determinism."""

import numpy as np
import pytest


from autotvm.task.space import DIRECTIONS
from ga_tuner import GATuner
from rl_tuner import DQNAgent, DQNConfig, GADQNTuner
from rl_tuner.gadqn_tuner import FAILURE_PENALTY, REWARD_CAP

from synthetic import (SyntheticTask, dominant_knob, inner_tiles, nk_landscape, one_knob_dominates, run,
                       synthetic_measure, trials_to_reach)

SEEDS = range(6)


def greedy_mutation_action(tuner: GADQNTuner, knob: list[int], keep_allowed: bool = False) -> int:
    """The action the mutation network prefers for a child (no exploration)."""
    state = tuner.mutation_states([knob])[0]
    return tuner.mutation_agent.greedy_action(state, tuner.mutation_masks([keep_allowed], [knob])[0])


def greedy_crossover_action(tuner: GADQNTuner, p1_knob: list[int], p2_knob: list[int]) -> int:
    """The cut point the crossover network prefers for two parents (of fitness 0)."""
    from autotvm.tuner.population import Member

    pair = (Member(list(p1_knob), 0, 0.0), Member(list(p2_knob), 0, 0.0))
    return tuner.crossover_agent.greedy_action(tuner.crossover_states([pair])[0], tuner.crossover_mask())


@pytest.fixture(scope="module")
def dominant_runs():
    task = dominant_knob()
    runs = {"dqn": [], "random": []}
    for seed in SEEDS:
        for policy in runs:
            # the agents alone: every bred child is measured (no model screen)
            runs[policy].append(run(GADQNTuner(task, pop_size=16, action_policy=policy if policy == "random" else "dqn",
                                               screen=1, seed=seed), task, 300))
    return task, runs


def test_mutation_agent_learns_the_dominant_knob(dominant_runs):
    task, runs = dominant_runs
    d = task.dominant
    rng = np.random.default_rng(0)
    # greedy choice for the final population's children with the dominant knob moved off its optimum
    greedy = [[t.decode_mutation(greedy_mutation_action(t,
        m.knob[:d] + [int(rng.integers(task.width // 2))] + m.knob[d + 1:])) for m in t.population]
        for t in runs["dqn"]]
    on_dominant = [np.mean([knob == d for knob, _ in moves]) for moves in greedy]
    # a uniform choice picks the dominant knob about three times in nineteen (six knobs with a
    # step down, a step up and a redraw each, and "keep")
    assert np.median(on_dominant) >= 0.3, on_dominant
    # and moves it the way that pays: up, or a redraw (which lands above half the time)
    ways = [move for moves in greedy for knob, move in moves if knob == d]
    assert np.mean([move != DIRECTIONS.index("down") for move in ways]) >= 0.9, ways


def test_gadqn_reaches_the_optimum_sooner_than_its_ablation(dominant_runs):
    task, runs = dominant_runs
    goal = 0.97 * task.optimum
    dqn = [trials_to_reach(t, goal) for t in runs["dqn"]]
    rand = [trials_to_reach(t, goal) for t in runs["random"]]
    assert np.median(dqn) < np.median(rand), (dqn, rand)
    assert sum(dqn) < sum(rand), (dqn, rand)  # a run that never gets there counts 10**6 trials


@pytest.mark.parametrize("make", [lambda t, s: GATuner(t, pop_size=10, seed=s),
                                  lambda t, s: GADQNTuner(t, pop_size=10, seed=s),
                                  lambda t, s: GADQNTuner(t, pop_size=10, action_policy="random", seed=s),
                                  lambda t, s: GADQNTuner(t, pop_size=10, screen=1, seed=s)])
@pytest.mark.parametrize("batch", [1, 3, 4])
def test_exact_budget_full_batches_no_duplicates(make, batch):
    task = one_knob_dominates()
    seen_batches = []
    tuner = make(task, 0)
    tuner.run_loop(synthetic_measure(task), batch, 47,
                   callbacks=[lambda t, i, r: seen_batches.append(len(r))])
    indices = [h["index"] for h in tuner.history]
    assert len(indices) == 47 and len(set(indices)) == 47
    assert seen_batches[:-1] == [batch] * (len(seen_batches) - 1)
    assert all(len(tuner.population) <= tuner.pop_size for _ in [0])


@pytest.mark.parametrize("make", [lambda t: GATuner(t, pop_size=8, seed=0), lambda t: GADQNTuner(t, pop_size=8, seed=0)])
def test_small_space_is_enumerated_without_repeats(make):
    task = SyntheticTask((3, 4), lambda k: 1.0 + k[0] + k[1])
    tuner = run(make(task), task, 50)
    assert sorted(h["index"] for h in tuner.history) == list(range(12))
    assert tuner.best_flops / 1e9 == pytest.approx(6.0)


def test_seed_makes_proposals_deterministic():
    task = one_knob_dominates()
    a = run(GADQNTuner(task, pop_size=8, seed=3), task, 60)
    b = run(GADQNTuner(task, pop_size=8, seed=3), task, 60)
    assert [h["index"] for h in a.history] == [h["index"] for h in b.history]
    c = run(GATuner(task, pop_size=8, seed=3), task, 60)
    d = run(GATuner(task, pop_size=8, seed=3), task, 60)
    assert [h["index"] for h in c.history] == [h["index"] for h in d.history]


def test_failures_are_penalised_lightly_and_rewards_bounded():
    task = SyntheticTask((8, 8, 8), lambda k: 0.0 if k[0] == 0 else 1.0 + k[1])
    tuner = run(GADQNTuner(task, pop_size=8, seed=0), task, 80)
    rewards = [row["reward"] for row in tuner.monitor]
    failed = [row["reward"] for row in tuner.monitor if row["gflops"] == 0]
    assert failed and all(r == -FAILURE_PENALTY for r in failed)
    assert all(-1 <= r <= REWARD_CAP for r in rewards)


@pytest.mark.parametrize("reward", ["improvement", "score", "r1", "r2", "r3"])
def test_every_reward_function_runs(reward):
    task = one_knob_dominates()
    tuner = run(GADQNTuner(task, pop_size=8, reward=reward, seed=0), task, 40)
    assert len(tuner.history) == 40 and tuner.monitor


def test_monitor_rows_have_the_plotting_fields():
    task = one_knob_dominates()
    tuner = run(GADQNTuner(task, pop_size=8, seed=0, dqn={"learning_starts": 4}), task, 60)
    row = tuner.monitor[-1]
    for key in ("trial", "reward", "epsilon", "mutation_action", "mutated_knob", "mutation_move", "crossover_action",
                "mutation_loss",
                "best_gflops", "mean_gflops"):
        assert key in row
    assert any(r["mutation_loss"] is not None for r in tuner.monitor)
    assert tuner.monitor[0]["epsilon"] > tuner.monitor[-1]["epsilon"]


def test_save_load_modes_and_transfer(tmp_path):
    task = one_knob_dominates()
    trained = run(GADQNTuner(task, pop_size=8, seed=0), task, 80)
    path = str(tmp_path / "agent.pt")
    trained.save(path)
    greedy = GADQNTuner(task, pop_size=8, mode="greedy", checkpoint=path, seed=0)
    probes = [trained.space.point2knob(i) for i in trained.space.sample_ints(20, np.random.default_rng(0))]
    assert [greedy_mutation_action(greedy, k) for k in probes] == [greedy_mutation_action(trained, k) for k in probes]
    assert [greedy_crossover_action(greedy, k, k[::-1]) for k in probes] == \
           [greedy_crossover_action(trained, k, k[::-1]) for k in probes]
    run(greedy, task, 20)
    assert greedy.mutation_agent.transitions == trained.mutation_agent.transitions  # greedy never learns
    cont = GADQNTuner(task, pop_size=8, mode="continue", checkpoint=path, seed=0)
    run(cont, task, 40)
    assert cont.mutation_agent.transitions > trained.mutation_agent.transitions
    # another task with a different knob count: padded states, masked actions
    other = SyntheticTask((5, 6, 7), lambda k: 1.0 + sum(k))
    moved = run(GADQNTuner(other, pop_size=6, mode="continue", checkpoint=path, seed=0), other, 30)
    assert all(row["mutated_knob"] is None or row["mutated_knob"] < 3 for row in moved.monitor)
    assert all(row["crossover_action"] is None or row["crossover_action"] < 2 for row in moved.monitor)


def test_one_and_two_knob_tasks():
    one = SyntheticTask((40,), lambda k: 1.0 + k[0])
    tuner = run(GADQNTuner(one, pop_size=6, seed=0), one, 30)
    assert all(row["crossover_action"] is None for row in tuner.monitor)
    two = SyntheticTask((10, 10), lambda k: 1.0 + k[0] * k[1])
    tuner = run(GADQNTuner(two, pop_size=6, seed=0), two, 40)
    assert {row["crossover_action"] for row in tuner.monitor} <= {0}


def test_bad_options_are_refused():
    task = one_knob_dominates()
    for kwargs, word in (({"reward": "r9"}, "reward"), ({"mode": "greedy"}, "checkpoint"),
                         ({"action_policy": "x"}, "action_policy")):
        with pytest.raises(ValueError, match=word):
            GADQNTuner(task, **kwargs)
    for screen in (0, 2.5):
        with pytest.raises(ValueError, match="screen"):
            GATuner(task, screen=screen)


def test_dqn_agent_learns_a_bandit():
    agent = DQNAgent(2, 3, DQNConfig(eps_decay_steps=50, learning_starts=8), seed=0)
    rng = np.random.default_rng(0)
    mask = np.ones(3, bool)
    for _ in range(400):
        state = rng.random(2).astype(np.float32)
        action = agent.act(state, mask)
        reward = 1.0 if action == 2 else 0.0
        agent.observe(state, action, reward, state, mask, True)
    assert agent.greedy_action(np.array([0.5, 0.5], np.float32), mask) == 2
    assert agent.greedy_action(np.array([0.5, 0.5], np.float32), np.array([True, True, False])) in (0, 1)


@pytest.mark.parametrize("make", [lambda t: GATuner(t, pop_size=8, seed=0), lambda t: GADQNTuner(t, pop_size=8, seed=0)])
def test_resume_breeds_from_loaded_records(make):
    from autotvm.measure.measure import MeasureInput

    task = one_knob_dominates()
    first = run(make(task), task, 30)
    measure = synthetic_measure(task)
    inputs = [MeasureInput(None, task, task.config_space.get(h["index"])) for h in first.history]
    second = make(task)
    assert second.load_history(list(zip(inputs, measure(inputs)))) == 30
    assert second.best_flops == first.best_flops
    run(second, task, 20)
    assert second.generation >= 1  # bred from the loaded records, not a new random population
    assert not {h["index"] for h in second.history} & {h["index"] for h in first.history}


@pytest.mark.parametrize("tuner_class", [GATuner, GADQNTuner])
def test_screen_reaches_the_optimum_sooner(tuner_class):
    """Measuring only the child the cost model ranks first of eight finds the dominant knob's
    optimum in fewer trials than measuring every child, over several seeds."""
    task = dominant_knob()
    goal = 0.97 * task.optimum
    trials = {screen: [trials_to_reach(run(tuner_class(task, pop_size=16, screen=screen, seed=seed), task, 200), goal)
                       for seed in range(4)] for screen in (1, 8)}
    assert np.median(trials[8]) < np.median(trials[1]), trials


def test_screen_is_deterministic_and_fits_once_per_generation():
    task = one_knob_dominates()
    a = run(GADQNTuner(task, pop_size=8, screen=4, seed=3), task, 40)
    b = run(GADQNTuner(task, pop_size=8, screen=4, seed=3), task, 40)
    assert [h["index"] for h in a.history] == [h["index"] for h in b.history]
    assert a.screen_model is not None and a.screen_model.fitted


def test_batched_acting_matches_single_states_and_keeps_exploration():
    """``act_batch`` scores many states in one pass: its Q rows are those of single states, its
    greedy actions are the single-state ones, and epsilon follows transitions, not candidates
    scored (so a screen of 16 children does not use up exploration 16 times faster). The agent
    runs its networks on its own thread count and gives the caller's back."""
    import torch

    agent = DQNAgent(4, 5, DQNConfig(learning_starts=4), seed=0)
    rng = np.random.default_rng(0)
    mask = np.ones(5, bool)
    for _ in range(12):
        state = rng.random(4).astype(np.float32)
        agent.observe(state, int(rng.integers(5)), float(rng.random()), state, mask, True)
    states = rng.random((16, 4)).astype(np.float32)
    threads = torch.get_num_threads()
    eps = agent.epsilon
    _, q = agent.act_batch(states, np.ones((16, 5), bool))
    assert agent.epsilon == eps and torch.get_num_threads() == threads
    assert np.allclose(q, np.stack([agent.q_values(s) for s in states]), atol=1e-6)
    agent.training = False  # greedy: no exploration
    actions, _ = agent.act_batch(states, np.ones((16, 5), bool))
    assert list(actions) == [agent.greedy_action(s, mask) for s in states]


def test_ranked_acting_spreads_a_batch_over_the_best_actions():
    """``ranks``: state i takes its ``ranks[i]``-th best valid action, so identical states get
    distinct actions in order of Q, wrapping round the valid ones."""
    import torch

    agent = DQNAgent(3, 6, DQNConfig(), seed=0)
    agent.training = False  # no exploration
    with torch.no_grad():
        agent.q.net[-1].bias.copy_(torch.tensor([0.5, 0.1, 0.9, 0.3, 0.7, 0.2]))
    states = np.zeros((6, 3), np.float32)
    mask = np.array([True, True, True, False, True, True])  # action 3 is invalid
    actions, _ = agent.act_batch(states, np.repeat(mask[None], 6, axis=0), np.arange(6))
    assert list(actions) == [2, 4, 0, 5, 1, 2]


def test_a_slots_candidates_take_the_top_of_the_agents_ranking():
    """Greedy on every candidate, a slot's 16 children (similar parents, similar states) would
    mostly take one move and leave the screen nothing to choose from: without exploration,
    candidate i takes its i-th best valid move, so a slot's moves are the top of the ranking."""
    task = nk_landscape(seed=0)
    tuner = run(GADQNTuner(task, seed=0), task, 80)
    tuner.mutation_agent.training = False
    children = tuner.crossover(tuner.select_parent_pairs(tuner.parents, tuner.parent_probs, tuner.screen))
    tuner.mutate(children, set())
    actions = [child.info["mutation"][1] for child in children]
    assert len(set(actions)) >= tuner.screen // 2, actions


def test_the_command_line_passes_every_gadqn_option():
    """``tools.tuners`` keeps only the options it knows for each tuner name (GA-DQN's ``OPTIONS``):
    every keyword of GA-DQN must be among them, or a config's setting is silently dropped."""
    import inspect

    from tools.tuners import TUNER_OPTIONS, make_tuner

    keywords = set(inspect.signature(GADQNTuner.__init__).parameters) - {"self", "task", "seed"}
    assert keywords <= TUNER_OPTIONS["ga-dqn"], keywords - TUNER_OPTIONS["ga-dqn"]
    assert make_tuner("ga-dqn", one_knob_dominates(), seed=0, pop_size=12).pop_size == 12


def _mean_objective(task, indices):
    """The synthetic objective's mean over the configs at ``indices``."""
    return np.mean([task.objective(task.config_space.point2knob(i)) for i in indices])


@pytest.mark.parametrize("tuner_class", [GATuner, GADQNTuner])
def test_immigrants_are_the_models_picks_of_random_configs(tuner_class):
    """With ``immigrants=2`` every generation after the first gives two slots to the screen
    model's favourite of many random configs: not bred (GA-DQN stores no transition for them),
    far better than plain random configs on a smooth objective, budget exact, no repeats."""
    smooth = SyntheticTask((8, 8, 8, 8), lambda k: 1.0 + sum(k))
    options = {"immigrants": 2} if tuner_class is GATuner else {}  # GA-DQN's default
    tuner = run(tuner_class(smooth, pop_size=8, elite_num=2, screen=4, seed=0, **options), smooth, 96)
    assert len(tuner.history) == 96 and len({h["index"] for h in tuner.history}) == 96
    generations_after_first = (96 - 8 + 5) // 6  # 6 new members per generation, the last one partial
    assert len(tuner.immigrant_indices) == 2 * generations_after_first
    first_generation = [h["index"] for h in tuner.history[:8]]
    assert _mean_objective(smooth, tuner.immigrant_indices) > _mean_objective(smooth, first_generation) + 5
    if tuner_class is GADQNTuner:
        assert len(tuner.monitor) == 96 - 8 - len(tuner.immigrant_indices)
    if tuner_class is GATuner:
        assert run(GATuner(smooth, pop_size=8, screen=4, seed=0), smooth, 96).immigrant_indices == []


def test_bad_immigrants_are_refused():
    task = one_knob_dominates()
    for options in ({"immigrants": -1}, {"immigrants": 1.5}, {"immigrants": True},
                    {"pop_size": 8, "elite_num": 3, "immigrants": 5}, {"screen": 1, "immigrants": 2}):
        with pytest.raises(ValueError, match="immigrant"):
            GATuner(task, **options)


def test_the_screen_model_steers_breeding_to_better_configs():
    """The screen model steers breeding on a smooth objective: the last children measured beat
    the random first generation, within the exact budget and without repeats."""
    smooth = SyntheticTask((8, 8, 8, 8), lambda k: 1.0 + sum(k))
    tuner = run(GATuner(smooth, pop_size=8, elite_num=2, screen=4, seed=1), smooth, 64)
    assert len(tuner.history) == 64 and len({h["index"] for h in tuner.history}) == 64
    first = [h["index"] for h in tuner.history[:8]]
    later = [h["index"] for h in tuner.history[-24:]]
    assert _mean_objective(smooth, later) > _mean_objective(smooth, first) + 5


def test_directed_mutation_learns_which_way_to_move_a_tile(tmp_path):
    task = inner_tiles()
    into_last = [i for i, d in enumerate(DIRECTIONS) if isinstance(d, tuple) and d[1] == 3]
    rng = np.random.default_rng(0)
    probes = [task.config_space.point2knob(i) for i in task.config_space.sample_ints(40, rng)]
    shares = []
    for seed in range(5):
        tuner = run(GADQNTuner(task, pop_size=16, mutation="directed", screen=1, seed=seed),
                    task, 200)
        moves = [tuner.decode_mutation(greedy_mutation_action(tuner, k))[1] for k in probes]
        valid = [m[: len(DIRECTIONS) * tuner.max_knobs].reshape(len(DIRECTIONS), -1)
                 for m in tuner.mutation_masks([False] * len(probes), probes)]
        chance = np.mean([v[into_last].sum() / max(v.sum(), 1) for v in valid])  # uniform choice's share
        shares.append((np.mean([m in into_last for m in moves]), chance))
    # measured: 0.68, 0.95, 0.15, 0.62, 0.75 of the probes against 0.25 by chance (seeds 0-4)
    assert np.median([share / chance for share, chance in shares]) >= 2, shares
    # a saved directed agent loads with its action layout and gives the same Q values
    path = str(tmp_path / "directed.pt")
    tuner.save(path)
    loaded = GADQNTuner(task, pop_size=16, mode="greedy", checkpoint=path, seed=0)
    assert loaded.directed and loaded.moves == tuner.moves
    states = tuner.mutation_states(probes)
    np.testing.assert_array_equal(loaded.mutation_agent.q_values(states), tuner.mutation_agent.q_values(states))
    masks = [False] * len(probes)
    np.testing.assert_array_equal(loaded.mutation_masks(masks, probes), tuner.mutation_masks(masks, probes))


