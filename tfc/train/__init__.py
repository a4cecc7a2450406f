"""``tfc.train``: TF1's optimizers, learning-rate schedules, the global step and
gradient clipping, all built from graph ops (``tf.train`` / ``tf.compat.v1.train``).

    step = tfc.train.get_or_create_global_step()
    lr = tfc.train.exponential_decay(0.1, step, 1000, 0.96)
    train_op = tfc.train.AdamOptimizer(lr).minimize(loss, global_step=step)
"""

from tfc.api.saver import Saver, latest_checkpoint
from tfc.train.clip import clip_by_global_norm, global_norm
from tfc.train.parallel import data_parallel
from tfc.train.optimizers import (AdagradOptimizer, AdamOptimizer, GradientDescentOptimizer,
                                  MomentumOptimizer, Optimizer, RMSPropOptimizer,
                                  trainable_variables)
from tfc.train.schedules import (cosine_decay, create_global_step, exponential_decay,
                                 get_global_step, get_or_create_global_step,
                                 piecewise_constant)

__all__ = [
    "Optimizer", "GradientDescentOptimizer", "MomentumOptimizer", "AdagradOptimizer",
    "RMSPropOptimizer", "AdamOptimizer", "trainable_variables",
    "get_global_step", "create_global_step", "get_or_create_global_step",
    "exponential_decay", "cosine_decay", "piecewise_constant",
    "clip_by_global_norm", "global_norm", "Saver", "latest_checkpoint", "data_parallel",
]

# TF1's input threads (tf.train.QueueRunner, tf.train.Coordinator); the queues: tfc.queue
from tfc.queue.runner import (Coordinator, QueueRunner, add_queue_runner,  # noqa: E402
                              start_queue_runners)

__all__ += ["Coordinator", "QueueRunner", "add_queue_runner", "start_queue_runners"]
