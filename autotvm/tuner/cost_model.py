"""``XGBCostModel``: an XGBoost model that ranks configs by predicted speed, as AutoTVM's.

Shared by the XGB tuner (which searches the model with simulated annealing) and the population
tuners' optional screen (which measures only the most promising of several bred children).
"""

from __future__ import annotations

import numpy as np
import xgboost as xgb  # at import, as AutoTVM's cost model: imported inside the first fit, its import
# time would count as tuning overhead in a process's first run

LOSSES = ("rank", "reg")


class XGBCostModel:
    """Fit on (features, FLOP/s) pairs; ``predict`` gives scores whose order is what matters."""

    def __init__(self, loss_type: str = "rank", num_threads: int = 1, seed: int = 0) -> None:
        if loss_type not in LOSSES:
            raise ValueError(f"unknown loss_type {loss_type!r}; allowed: {', '.join(LOSSES)}")
        self.loss_type, self.num_threads, self.seed = loss_type, num_threads, seed
        self.booster = None

    @property
    def fitted(self) -> bool:
        return self.booster is not None

    def fit(self, x: np.ndarray, flops: np.ndarray) -> None:
        """Refit from scratch; a set with no successful config leaves the model as it was."""
        ys = np.asarray(flops, dtype=np.float64)
        if len(ys) == 0 or ys.max() <= 1e-6:
            return
        params = {"max_depth": 6, "gamma": 0.0001, "min_child_weight": 1, "subsample": 1.0, "eta": 0.3,
                  "lambda": 1.0, "alpha": 0.0, "nthread": self.num_threads, "verbosity": 0, "seed": self.seed,
                  "objective": "rank:pairwise" if self.loss_type == "rank" else "reg:squarederror"}
        dtrain = xgb.DMatrix(np.asarray(x), label=ys / ys.max())
        if self.loss_type == "rank":
            dtrain.set_group([len(ys)])
        self.booster = xgb.train(params, dtrain, num_boost_round=100 if len(ys) < 500 else 200)

    def predict(self, x: np.ndarray) -> np.ndarray:
        return self.booster.inplace_predict(np.asarray(x))
