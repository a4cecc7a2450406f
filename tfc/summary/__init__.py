"""``tfc.summary``: summaries in the graph and TensorBoard event files (TF1's tf.summary).

    loss_summary = tfc.summary.scalar("loss", loss)
    tfc.summary.histogram("weights", W)
    merged = tfc.summary.merge_all()
    writer = tfc.summary.FileWriter("runs/x")
    values, _ = sess.run([merged, train_op], feeds)
    writer.add_summary(values, step)

A summary is a tagged tensor fetched in the same step as the rest (``summaries``); the
writer turns the values into TensorBoard's protos (``writer``, ``protos``) and an entry's
graph into a ``GraphDef`` (``graph_def``). The ``tensorboard`` package is needed only to
write (``pip install 'tfc[tensorboard]'``).
"""

from tfc.summary.summaries import (FETCH_PREFIX, Summary, SummaryValue, SummaryValues,
                                   fetch_name, histogram, image, merge, merge_all, scalar,
                                   split_fetches, text)
from tfc.summary.writer import FileWriter

__all__ = ["scalar", "histogram", "image", "text", "merge", "merge_all", "FileWriter",
           "Summary", "SummaryValue", "SummaryValues", "fetch_name", "split_fetches",
           "FETCH_PREFIX"]
