"""Distribution strategies for ``fit`` (``tf.distribute``'s): compile a model in a
strategy's ``scope()`` and ``fit`` trains it data-parallel over the strategy's replicas
(``tfc.distribute.strategy``; the step itself: ``tfc.distribute.fit``); custom loops use
``strategy.run`` and ``strategy.reduce`` (``tfc.distribute.run``)."""

from tfc.distribute.run import PerReplica, ReduceOp
from tfc.distribute.strategy import (MirroredStrategy, MultiWorkerMirroredStrategy,
                                     OneDeviceStrategy, ParameterServerStrategy, Strategy,
                                     get_strategy, has_strategy)

__all__ = ["Strategy", "OneDeviceStrategy", "MirroredStrategy", "MultiWorkerMirroredStrategy",
           "ParameterServerStrategy", "get_strategy", "has_strategy", "PerReplica", "ReduceOp"]
