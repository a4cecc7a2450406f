"""``tfc.queue``: TF1's queues (``FIFOQueue``, ``RandomShuffleQueue``) for the graph API.

A queue's state lives on the host (a bounded buffer guarded by a condition variable);
its ops are host work around a step (``tfc.api.host``): ``dequeue``/``dequeue_many``/``size``
are placeholders the session fills from the queue before the compiled step (a dequeue
blocks until there is data), and ``enqueue``/``enqueue_many``/``close`` are operations
whose values the step computes and hands to the queue after it. Producer threads
(``QueueRunner``) fill a queue while steps dequeue; a closed, empty queue raises
``tfc.errors.OutOfRangeError`` (the end of the input); every wait is bounded."""

from tfc.queue.queues import FIFOQueue, QueueBase, RandomShuffleQueue
from tfc.queue.runner import (Coordinator, QueueRunner, add_queue_runner,
                              start_queue_runners)

__all__ = ["FIFOQueue", "RandomShuffleQueue", "QueueBase", "QueueRunner", "Coordinator",
           "add_queue_runner", "start_queue_runners"]
