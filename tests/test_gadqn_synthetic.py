"""GA and GA-DQN search logic on synthetic objectives (no builds): learning, budget, determinism."""

import numpy as np
import pytest
import torch

from autotvm.task.space import DIRECTIONS
from ga_tuner import GATuner
from rl_tuner import DQNAgent, DQNConfig, GADQNTuner

from synthetic import (SyntheticTask, dominant_knob, inner_tiles, nk_landscape, one_knob_dominates, run,
                       synthetic_measure, trials_to_reach)

SEEDS = range(6)


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
    greedy = [[t.decode_mutation(t.greedy_mutation_action(
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
    assert failed and all(r == -tuner.failure_penalty for r in failed)
    assert all(-1 <= r <= tuner.reward_cap for r in rewards)


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
    assert [greedy.greedy_mutation_action(k) for k in probes] == [trained.greedy_mutation_action(k) for k in probes]
    assert [greedy.greedy_crossover_action(k, k[::-1]) for k in probes] == \
           [trained.greedy_crossover_action(k, k[::-1]) for k in probes]
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


def test_per_knob_network_shares_its_weights_across_knobs(tmp_path):
    """The "per_knob" network scores every knob's moves with one set of weights: two entity rows
    swapped swap their Q values, and a saved agent moves to a task with another knob count."""
    n, dim, moves = 4, 3, 5
    agent = DQNAgent(n * dim + 1, moves * n + 1, DQNConfig(entities=n, entity_dim=dim), seed=0)
    for p in agent.q.parameters():  # away from the zero-initialised head, so every output differs
        torch.nn.init.normal_(p)
    rows = np.random.default_rng(0).random((n, dim)).astype(np.float32)
    swapped = rows[[1, 0, 2, 3]]
    q, q_swapped = (agent.q_values(np.append(r.ravel(), 0.5)).reshape(-1) for r in (rows, swapped))
    per_move, per_move_swapped = q[:-1].reshape(moves, n), q_swapped[:-1].reshape(moves, n)
    np.testing.assert_allclose(per_move_swapped, per_move[:, [1, 0, 2, 3]], rtol=1e-5)
    assert q[-1] == pytest.approx(q_swapped[-1])  # the global action sees the rows as a set
    with pytest.raises(ValueError, match="entity layout"):
        DQNAgent(5, 3, DQNConfig(entities=4, entity_dim=3))
    task = nk_landscape(n=6, seed=0)
    trained = run(GADQNTuner(task, pop_size=8, q_network="per_knob", seed=0), task, 60)
    path = str(tmp_path / "per_knob.pt")
    trained.save(path)
    other = SyntheticTask((5, 6, 7), lambda k: 1.0 + sum(k))
    moved = run(GADQNTuner(other, pop_size=6, mode="continue", checkpoint=path, seed=0), other, 30)
    assert moved.per_knob and all(row["mutated_knob"] is None or row["mutated_knob"] < 3 for row in moved.monitor)
    with pytest.raises(ValueError, match="q_network"):
        GADQNTuner(task, q_network="deep")


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


def test_stall_state_option():
    """The stall counts generations since the best improved and resets when it does; with
    ``stall_state`` the mutation agent's state ends with the better parent's fitness and the
    stall (saturating at 1), without it the state is the genes alone."""
    flat = SyntheticTask((6, 6, 6), lambda k: 1.0 + (k == [5, 5, 5]))  # one config better, the rest equal
    tuner = run(GADQNTuner(flat, pop_size=6, seed=0, stall_state=True, immigrants=0), flat, 60)
    stalls = [row["stalled_generations"] for row in tuner.monitor]
    assert max(stalls) >= 2 and all(b in (a, a + 1, 0) for a, b in zip(stalls, stalls[1:]))
    state = tuner.mutation_state([0, 0, 0], 0.5, 10)
    assert state.shape == (tuner.max_knobs + tuner.n_level_features + 2,) and list(state[-2:]) == [0.5, 1.0]
    plain = GADQNTuner(flat, pop_size=6, seed=0)
    width = plain.max_knobs + plain.n_level_features  # the genes, then every split's levels
    assert plain.mutation_agent.state_dim == width == len(plain.mutation_state([0, 0, 0], 0.5, 10))
    assert GADQNTuner(flat, pop_size=6, seed=0, mutation="mixed").mutation_agent.state_dim == plain.max_knobs


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


def _screened_slots(tuner: GADQNTuner, task, trials: int) -> list[tuple[int, list]]:
    """Tune, and return every slot's screened candidates (children and infos) with the number
    of trials measured when they were bred."""
    slots = []
    breed = tuner.breed_batch

    def recording(parents, probs, taken, count):
        children = breed(parents, probs, taken, count)
        if count > 1:
            slots.append((len(tuner.history), children))
        return children

    tuner.breed_batch = recording
    run(tuner, task, trials)
    return slots


def _distinct_knobs_per_slot(spread: float, seed: int) -> float:
    """Mean number of distinct mutated knobs among the screen's candidates of a slot."""
    task = nk_landscape(seed=seed)
    tuner = GADQNTuner(task, spread=spread, seed=seed)
    counts = [len({tuner.decode_mutation(info["mutation"][1])[0] for _, info in children})
              for trials, children in _screened_slots(tuner, task, 200)
              if trials >= 100]  # epsilon has decayed: the agent exploits
    return float(np.mean(counts))


def test_spread_keeps_the_screened_candidates_diverse():
    """Greedy on every candidate, the screen's 16 children of a slot mutate two or three knobs
    (similar parents, similar states): the model has little to choose from. With ``spread`` they
    cover the agent's ranking instead (measured: 2.5 distinct knobs of 10 against 8.3 for
    uniform choices, NK landscapes)."""
    assert all(_distinct_knobs_per_slot(1.0, s) > 2 * _distinct_knobs_per_slot(0.0, s) for s in range(2))
    task = one_knob_dominates()
    for bad in (1.5, -0.1, "all", None):
        with pytest.raises(ValueError, match="spread"):
            GADQNTuner(task, spread=bad)


@pytest.mark.parametrize("policy", ["dqn", "random"])
def test_move_candidates_share_one_child_and_differ_in_their_move(policy):
    """``candidates="moves"``: a slot's candidates are one crossover child with distinct
    mutation actions, the agent's best first (or distinct uniform ones for the ablation)."""
    task = nk_landscape(seed=0)
    tuner = GADQNTuner(task, candidates="moves", action_policy=policy, seed=0)
    slots = [children for _, children in _screened_slots(tuner, task, 120)]
    assert slots and all(len(slot) == tuner.screen for slot in slots)
    for slot in slots:
        infos = [info for _, info in slot]
        assert len({(tuple(i["crossover"][0]), i["crossover"][1]) for i in infos}) == 1  # one parent pair, one cut
        actions = [i["mutation"][1] for i in infos]
        assert len(set(actions)) == len(actions)
    if policy == "dqn":  # without exploration, the candidates are the agent's top moves in order
        tuner.mutation_agent.training = False
        children = tuner.breed_batch(tuner.parents, tuner.parent_probs, set(), tuner.screen)
        _, _, mask = children[0][1]["mutation"]
        q = np.where(mask, children[0][1]["mutation_q"], -np.inf)
        chosen = q[[info["mutation"][1] for _, info in children]]
        np.testing.assert_allclose(chosen, np.sort(q)[::-1][: tuner.screen], rtol=0, atol=1e-8)
    with pytest.raises(ValueError, match="candidates"):
        GADQNTuner(task, candidates="pairs")


def test_the_command_line_passes_every_gadqn_option():
    """``tools.tuners`` keeps only the options it knows for each tuner name: every keyword of
    GA-DQN must be among them, or a config's setting is silently dropped."""
    import inspect

    from tools.tuners import TUNER_OPTIONS, make_tuner

    keywords = set(inspect.signature(GADQNTuner.__init__).parameters) - {"self", "task", "seed"}
    assert keywords <= TUNER_OPTIONS["ga-dqn"], keywords - TUNER_OPTIONS["ga-dqn"]
    assert make_tuner("ga-dqn", one_knob_dominates(), seed=0, spread=0.5).spread == 0.5


@pytest.mark.parametrize("tuner_class", [GATuner, GADQNTuner])
def test_restart_brings_random_newcomers_after_a_stall(tuner_class):
    """With ``restart_after=2`` every third stalled generation is filled with unvisited random
    configs (not bred: GA-DQN stores no transition for them); the budget stays exact and no
    config is measured twice. Without it no generation restarts."""
    flat = SyntheticTask((6, 6, 6, 6), lambda k: 1.0 + (k == [5, 5, 5, 5]))  # nothing to climb
    tuner = run(tuner_class(flat, pop_size=6, screen=4, restart_after=2, seed=0), flat, 120)
    assert len(tuner.history) == 120 and len({h["index"] for h in tuner.history}) == 120
    assert len(tuner.restart_generations) >= 2
    assert all(b - a >= 3 for a, b in zip(tuner.restart_generations, tuner.restart_generations[1:]))
    if tuner_class is GADQNTuner:  # a row per bred child: 3 newcomers per full restart generation are not
        assert len(tuner.monitor) <= 120 - 6 - 3 * (len(tuner.restart_generations) - 1)
    plain = run(tuner_class(flat, pop_size=6, screen=4, seed=0), flat, 120)
    assert plain.restart_generations == []


def test_bad_restart_after_is_refused():
    task = one_knob_dominates()
    for value in (0, 1.5, "2", True):
        with pytest.raises(ValueError, match="restart_after"):
            GADQNTuner(task, restart_after=value)


def _mean_objective(task, indices):
    """The synthetic objective's mean over the configs at ``indices``."""
    return np.mean([task.objective(task.config_space.point2knob(i)) for i in indices])


@pytest.mark.parametrize("tuner_class", [GATuner, GADQNTuner])
def test_immigrants_are_the_models_picks_of_random_configs(tuner_class):
    """With ``immigrants=2`` every generation after the first gives two slots to the screen
    model's favourite of many random configs: not bred (GA-DQN stores no transition for them),
    far better than plain random configs on a smooth objective, budget exact, no repeats."""
    smooth = SyntheticTask((8, 8, 8, 8), lambda k: 1.0 + sum(k))
    tuner = run(tuner_class(smooth, pop_size=8, elite_num=2, screen=4, immigrants=2, seed=0), smooth, 96)
    assert len(tuner.history) == 96 and len({h["index"] for h in tuner.history}) == 96
    generations_after_first = (96 - 8 + 5) // 6  # 6 new members per generation, the last one partial
    assert len(tuner.immigrant_indices) == 2 * generations_after_first
    first_generation = [h["index"] for h in tuner.history[:8]]
    assert _mean_objective(smooth, tuner.immigrant_indices) > _mean_objective(smooth, first_generation) + 5
    if tuner_class is GADQNTuner:
        assert len(tuner.monitor) == 96 - 8 - len(tuner.immigrant_indices)
    assert run(tuner_class(smooth, pop_size=8, screen=4, immigrants=0, seed=0), smooth, 96).immigrant_indices == []


def test_bad_immigrants_are_refused():
    task = one_knob_dominates()
    for options in ({"immigrants": -1}, {"immigrants": 1.5}, {"immigrants": True}, {"immigrant_pool": 0},
                    {"pop_size": 8, "elite_num": 3, "immigrants": 5}, {"screen": 1, "immigrants": 2}):
        with pytest.raises(ValueError, match="immigrant"):
            GADQNTuner(task, **options)


@pytest.mark.parametrize("tuner_class", [GATuner, GADQNTuner])
def test_generation_screen_measures_the_top_of_one_ranked_pool(tuner_class):
    """``screen_scope="generation"`` breeds ``screen`` children per bred slot in one pool at the
    start of a generation and measures them best first by the model: one pool per generation,
    predictions non-increasing within it, budget exact, no repeats."""
    smooth = SyntheticTask((8, 8, 8, 8), lambda k: 1.0 + sum(k))
    pools, picks = [], []

    class Spy(tuner_class):
        def breed_batch(self, parents, probs, taken, count):
            pools.append((self.generation, count))
            return super().breed_batch(parents, probs, taken, count)

        def _generation_pick(self, taken):
            member = super()._generation_pick(taken)
            picks.append((self.generation, float(self._predicted([member])[0])))
            return member

    tuner = run(Spy(smooth, pop_size=8, elite_num=2, screen=4, immigrants=0, screen_scope="generation", seed=0),
                smooth, 96)
    assert len(tuner.history) == 96 and len({h["index"] for h in tuner.history}) == 96
    generations = sorted({g for g, _ in picks})
    assert [g for g, _ in pools] == generations and all(count == 4 * 6 for _, count in pools)
    for generation in generations:
        predicted = [p for g, p in picks if g == generation]
        assert predicted == sorted(predicted, reverse=True)
    first = [h["index"] for h in tuner.history[:8]]
    later = [h["index"] for h in tuner.history[-24:]]
    assert _mean_objective(smooth, later) > _mean_objective(smooth, first) + 5


def test_unknown_screen_scope_is_refused():
    with pytest.raises(ValueError, match="screen_scope 'batch'; allowed: slot, generation"):
        GADQNTuner(one_knob_dominates(), screen_scope="batch")


def test_unknown_screen_model_is_refused():
    with pytest.raises(ValueError, match="screen_model 'svm'; allowed: rank, reg"):
        GADQNTuner(one_knob_dominates(), screen_model="svm")
    with pytest.raises(ValueError, match="screen_model 'svm'; allowed: rank, reg"):
        GATuner(one_knob_dominates(), screen_model="svm")


@pytest.mark.parametrize("screen_model", ["reg", "rank"])
def test_both_screen_models_steer_breeding_to_better_configs(screen_model):
    """Either screen model steers breeding on a smooth objective: the last children measured
    beat the random first generation, within the exact budget and without repeats."""
    smooth = SyntheticTask((8, 8, 8, 8), lambda k: 1.0 + sum(k))
    tuner = run(GADQNTuner(smooth, pop_size=8, elite_num=2, screen=4, immigrants=0, screen_model=screen_model, seed=1),
                smooth, 64)
    assert len(tuner.history) == 64 and len({h["index"] for h in tuner.history}) == 64
    first = [h["index"] for h in tuner.history[:8]]
    later = [h["index"] for h in tuner.history[-24:]]
    assert _mean_objective(smooth, later) > _mean_objective(smooth, first) + 5


@pytest.mark.parametrize("q_network", ["flat", "per_knob"])
def test_directed_mutation_learns_which_way_to_move_a_tile(tmp_path, q_network):
    task = inner_tiles()
    into_last = [i for i, d in enumerate(DIRECTIONS) if isinstance(d, tuple) and d[1] == 3]
    rng = np.random.default_rng(0)
    probes = [task.config_space.point2knob(i) for i in task.config_space.sample_ints(40, rng)]
    shares = []
    for seed in range(5):
        tuner = run(GADQNTuner(task, pop_size=16, mutation="directed", screen=1, q_network=q_network, seed=seed),
                    task, 200)
        moves = [tuner.decode_mutation(tuner.greedy_mutation_action(k))[1] for k in probes]
        valid = [tuner.mutation_mask(knob=k)[: len(DIRECTIONS) * tuner.max_knobs].reshape(len(DIRECTIONS), -1)
                 for k in probes]
        chance = np.mean([v[into_last].sum() / max(v.sum(), 1) for v in valid])  # uniform choice's share
        shares.append((np.mean([m in into_last for m in moves]), chance))
    # measured: 0.68, 0.95, 0.15, 0.62, 0.75 of the probes against 0.25 by chance (seeds 0-4), "flat";
    # 0.98, 0.92, 0.60, 0.80, 1.00 "per_knob"
    assert np.median([share / chance for share, chance in shares]) >= 2, shares
    # a saved directed agent loads with its action layout and gives the same Q values
    path = str(tmp_path / "directed.pt")
    tuner.save(path)
    loaded = GADQNTuner(task, pop_size=16, mode="greedy", checkpoint=path, seed=0)
    assert loaded.directed and loaded.moves == tuner.moves and loaded.per_knob == (q_network == "per_knob")
    states = np.stack([tuner.mutation_state(k, 1.0, 0) for k in probes])
    np.testing.assert_array_equal(loaded.mutation_agent.q_values(states), tuner.mutation_agent.q_values(states))
    assert [loaded.mutation_mask(knob=k).tolist() for k in probes] == [tuner.mutation_mask(knob=k).tolist()
                                                                       for k in probes]


def test_agent_weight_gives_the_mutation_agent_a_say_in_the_screens_pick():
    """``agent_weight`` 0: the screen model alone picks among a slot's candidates; a weight far
    above their count: the candidate whose move the agent values most."""
    task = one_knob_dominates()
    tuner = GADQNTuner(task, pop_size=10, agent_weight=1000.0, seed=0)
    run(tuner, task, 60)
    candidates = tuner._bred_candidates(set(tuner.visited), 16)
    q = [m.info["mutation_q"][m.info["mutation"][1]] for m in candidates]
    pick = tuner._model_pick(candidates)
    assert pick.info["mutation_q"][pick.info["mutation"][1]] == max(q)
    tuner.agent_weight = 0.0
    predicted = tuner._predicted(candidates)
    assert predicted[candidates.index(tuner._model_pick(candidates))] == predicted.max()
    with pytest.raises(ValueError, match="agent_weight must be a number >= 0"):
        GADQNTuner(task, agent_weight=-1.0)
