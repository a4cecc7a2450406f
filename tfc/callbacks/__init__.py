"""``tfc.callbacks``: hooks into ``Sequential.fit`` (``tf.keras.callbacks``).

    model.fit(x, y, epochs=20, validation_data=(xv, yv), callbacks=[
        tfc.callbacks.ModelCheckpoint("ckpts", monitor="val_loss", max_to_keep=3),
        tfc.callbacks.EarlyStopping(patience=3, restore_best_weights=True),
        tfc.callbacks.LearningRateScheduler(lambda epoch, lr: lr * 0.9),
        tfc.callbacks.TensorBoard("runs/x", histogram_freq=1),
        tfc.callbacks.CSVLogger("train.csv")])
    model.load_weights(tfc.train.latest_checkpoint("ckpts"))
"""

from tfc.callbacks.base import Callback, CallbackList
from tfc.callbacks.checkpoint import ModelCheckpoint
from tfc.callbacks.csv_logger import CSVLogger
from tfc.callbacks.early_stopping import EarlyStopping
from tfc.callbacks.lr_scheduler import LearningRateScheduler
from tfc.callbacks.tensorboard import TensorBoard

__all__ = ["Callback", "CallbackList", "ModelCheckpoint", "EarlyStopping",
           "LearningRateScheduler", "TensorBoard", "CSVLogger"]
