"""Whole TensorFlow 1 programs, run with ``import tfc as tf``, against TensorFlow itself.

Each program below is a short, classic TF1 program (the idioms of the TF1 tutorials and
books: placeholders, ``feed_dict``, ``tf.Variable`` with numpy initial values, an
optimizer's ``minimize``, ``with tf.Session() as sess``) written once as a function of a
module ``tf``. It runs with ``tf = tensorflow.compat.v1`` (graph mode, after
``disable_v2_behavior()``) and with ``tf = tfc`` on each tfc backend, and every value any
``sess.run`` returns (losses per step, predictions, accuracies, final variables) is
compared. Data are seeded numpy arrays and initial values are numpy arrays, so neither
initializers nor random ops decide the numbers.

Tolerances: programs run in float64 where the idiom allows (then agreement is to rounding:
``rtol = 1e-9``, after up to 40 training steps), float32 programs (the CNN, whose
convolutions TensorFlow sums in another order) at ``rtol = 2e-4, atol = 2e-5``. Integer and
bool results must be equal.

A program that stops on tfc because a TF1 name is missing is listed "not supported" with
the name; a ``TfcError`` is "tfc error"; any other exception from inside tfc is a CRASH
(the worst after wrong numbers). A numeric difference is a MISMATCH, unless the program
documents it as EXPECTED (a deliberate difference, README "differences").

The ``tf.layers`` programs need TensorFlow's legacy Keras (``pip install tf-keras``; the
tool sets ``TF_USE_LEGACY_KERAS=1``): without it TensorFlow 2.21 has no ``tf.layers.dense``
and they are listed "TF cannot run it".

It is a tool, not a test (CI has no TensorFlow). Usage::

    python tools/conformance_tf1_programs.py [--programs NAME,...] [--backends llvm,reference]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # (tf.layers needs tf_keras: pip tf-keras)

import tfc  # noqa: E402

Rec = Callable[[str, Any], None]
F64 = (1e-9, 1e-12)
F32 = (2e-4, 2e-5)


@dataclass
class Program:
    name: str
    fn: Callable[[Any, Rec], None]
    tol: tuple[float, float] = F64
    expected: str = ""  # a documented difference: why the values may differ


PROGRAMS: list[Program] = []


def program(tol: tuple[float, float] = F64, expected: str = "") -> Callable[[Any], Any]:
    def reg(fn: Callable[[Any, Rec], None]) -> Callable[[Any, Rec], None]:
        PROGRAMS.append(Program(fn.__name__, fn, tol, expected))
        return fn
    return reg


def _data(seed: int, n: int, d: int, classes: int) -> tuple[np.ndarray, np.ndarray]:
    rs = np.random.RandomState(seed)
    x = rs.randn(n, d)
    w = rs.randn(d, classes)
    y = np.argmax(x @ w + 0.5 * rs.randn(n, classes), axis=1)
    return x, y


def _init(seed: int, *shape: int, scale: float = 0.1) -> np.ndarray:
    return np.random.RandomState(seed).randn(*shape) * scale


# ---- the programs ------------------------------------------------------------------------

@program()
def softmax_regression(tf: Any, rec: Rec) -> None:
    """The MNIST-for-beginners program: one-hot labels, softmax_cross_entropy_with_logits_v2,
    gradient descent, accuracy through argmax/equal/cast/reduce_mean."""
    x_data, labels = _data(0, 64, 20, 5)
    y_data = np.eye(5)[labels]
    with tf.Graph().as_default():
        x = tf.placeholder(tf.float64, [None, 20])
        y_ = tf.placeholder(tf.float64, [None, 5])
        W = tf.Variable(_init(1, 20, 5))
        b = tf.Variable(np.zeros(5))
        y = tf.matmul(x, W) + b
        cross_entropy = tf.reduce_mean(
            tf.nn.softmax_cross_entropy_with_logits_v2(labels=y_, logits=y))
        train_step = tf.train.GradientDescentOptimizer(0.5).minimize(cross_entropy)
        correct = tf.equal(tf.argmax(y, 1), tf.argmax(y_, 1))
        accuracy = tf.reduce_mean(tf.cast(correct, tf.float64))
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            for i in range(10):
                batch = slice(16 * (i % 4), 16 * (i % 4) + 16)
                _, loss = sess.run([train_step, cross_entropy],
                                   feed_dict={x: x_data[batch], y_: y_data[batch]})
                rec(f"loss{i}", loss)
            rec("accuracy", sess.run(accuracy, feed_dict={x: x_data, y_: y_data}))
            rec("W", sess.run(W))
            rec("b", b.eval())


@program()
def sparse_softmax_regression(tf: Any, rec: Rec) -> None:
    """Integer labels: sparse_softmax_cross_entropy_with_logits, tf.nn.softmax predictions,
    tf.one_hot, reduce_sum over an axis, tf.argmax output cast to the labels' dtype."""
    x_data, labels = _data(2, 48, 10, 4)
    with tf.Graph().as_default():
        x = tf.placeholder(tf.float64, [None, 10], name="x")
        y = tf.placeholder(tf.int64, [None], name="y")
        W = tf.Variable(_init(3, 10, 4), name="W")
        b = tf.Variable(np.zeros(4), name="b")
        logits = tf.nn.bias_add(tf.matmul(x, W), b)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=y, logits=logits))
        probs = tf.nn.softmax(logits)
        onehot_loss = -tf.reduce_mean(tf.reduce_sum(
            tf.one_hot(y, 4, dtype=tf.float64) * tf.log(probs), axis=1))
        opt = tf.train.GradientDescentOptimizer(learning_rate=0.3)
        train = opt.minimize(loss)
        pred = tf.argmax(probs, axis=1)
        acc = tf.reduce_mean(tf.cast(tf.equal(pred, y), tf.float64))
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            for i in range(15):
                lv, ol, _ = sess.run([loss, onehot_loss, train], {x: x_data, y: labels})
                rec(f"loss{i}", lv)
                rec(f"onehot_loss{i}", ol)
            p, a = sess.run([pred, acc], {x: x_data, y: labels})
            rec("pred", p)
            rec("acc", a)


@program(tol=F32)
def deep_mnist_cnn(tf: Any, rec: Rec) -> None:
    """The "Deep MNIST for experts" network on 8x8 images: conv2d/max_pool twice, reshape
    with -1, a dense layer, dropout with a keep_prob placeholder (fed 1.0, so that no random
    mask decides the numbers), Adam, float32."""
    rs = np.random.RandomState(4)
    x_data = rs.rand(32, 64).astype(np.float32)
    y_data = np.eye(3, dtype=np.float32)[rs.randint(0, 3, 32)]

    def weight(seed: int, *shape: int) -> Any:
        return tf.Variable(_init(seed, *shape).astype(np.float32))

    def bias(n: int) -> Any:
        return tf.Variable(np.full(n, 0.1, np.float32))

    with tf.Graph().as_default():
        x = tf.placeholder(tf.float32, [None, 64])
        y_ = tf.placeholder(tf.float32, [None, 3])
        keep_prob = tf.placeholder(tf.float32, [])
        x_image = tf.reshape(x, [-1, 8, 8, 1])
        W1, b1 = weight(5, 3, 3, 1, 4), bias(4)
        h1 = tf.nn.relu(tf.nn.conv2d(x_image, W1, strides=[1, 1, 1, 1], padding="SAME") + b1)
        p1 = tf.nn.max_pool(h1, ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1], padding="SAME")
        W2, b2 = weight(6, 3, 3, 4, 8), bias(8)
        h2 = tf.nn.relu(tf.nn.conv2d(p1, W2, strides=[1, 1, 1, 1], padding="SAME") + b2)
        p2 = tf.nn.max_pool(h2, ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1], padding="SAME")
        flat = tf.reshape(p2, [-1, 2 * 2 * 8])
        W3, b3 = weight(7, 32, 16), bias(16)
        fc = tf.nn.relu(tf.matmul(flat, W3) + b3)
        drop = tf.nn.dropout(fc, keep_prob=keep_prob)
        W4, b4 = weight(8, 16, 3), bias(3)
        logits = tf.matmul(drop, W4) + b4
        loss = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits_v2(
            labels=y_, logits=logits))
        train = tf.train.AdamOptimizer(1e-2).minimize(loss)
        acc = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, 1), tf.argmax(y_, 1)),
                                     tf.float32))
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            for i in range(8):
                _, lv = sess.run([train, loss], {x: x_data, y_: y_data, keep_prob: 1.0})
                rec(f"loss{i}", lv)
            rec("acc", sess.run(acc, {x: x_data, y_: y_data, keep_prob: 1.0}))
            rec("W1", sess.run(W1))
            rec("b4", sess.run(b4))


@program()
def interactive_session(tf: Any, rec: Rec) -> None:
    """The tutorials' notebook style: tf.InteractiveSession, initialize_all_variables and
    local_variables_initializer run with .run(), train_step.run(feed_dict=...),
    accuracy.eval(feed_dict=...), W.eval()."""
    x_data, labels = _data(36, 40, 6, 3)
    y_data = np.eye(3)[labels]
    with tf.Graph().as_default():
        sess = tf.InteractiveSession()
        x = tf.placeholder(tf.float64, [None, 6])
        y_ = tf.placeholder(tf.float64, [None, 3])
        W = tf.Variable(np.zeros((6, 3)))
        b = tf.Variable(np.zeros(3))
        y = tf.nn.softmax(tf.matmul(x, W) + b)
        cross_entropy = -tf.reduce_sum(y_ * tf.log(y))
        train_step = tf.train.GradientDescentOptimizer(0.01).minimize(cross_entropy)
        tf.initialize_all_variables().run()
        tf.local_variables_initializer().run()
        accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(y, 1), tf.argmax(y_, 1)),
                                          tf.float64))
        for i in range(6):
            train_step.run(feed_dict={x: x_data, y_: y_data})
            rec(f"xent{i}", cross_entropy.eval(feed_dict={x: x_data, y_: y_data}))
        rec("accuracy", accuracy.eval(feed_dict={x: x_data, y_: y_data}))
        rec("W", W.eval())
        sess.close()


@program()
def polynomial_regression(tf: Any, rec: Rec) -> None:
    """Linear regression on polynomial features: tf.pow, tf.stack, reduce_sum(square),
    a scalar learning rate, mean squared error by hand."""
    rs = np.random.RandomState(9)
    xs = np.linspace(-1, 1, 40)
    ys = 0.5 - 1.5 * xs + 2.0 * xs ** 3 + 0.1 * rs.randn(40)
    with tf.Graph().as_default():
        X = tf.placeholder(tf.float64, [None])
        Y = tf.placeholder(tf.float64, [None])
        feats = tf.stack([tf.pow(X, float(k)) for k in range(4)], axis=1)
        w = tf.Variable(np.zeros((4, 1)), name="weights")
        pred = tf.squeeze(tf.matmul(feats, w), axis=1)
        cost = tf.reduce_sum(tf.square(pred - Y)) / (2 * 40)
        train = tf.train.GradientDescentOptimizer(0.5).minimize(cost)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            for i in range(40):
                _, c = sess.run([train, cost], feed_dict={X: xs, Y: ys})
                rec(f"cost{i}", c)
            rec("w", sess.run(w))
            rec("pred", sess.run(pred, feed_dict={X: xs}))


@program(expected="a placeholder needs a shape, a rank at least (README)")
def linear_regression_scalar(tf: Any, rec: Rec) -> None:
    """The first TF1 program: y = W*x + b with scalar variables, fed one sample at a time
    with Python floats, reduce_mean(square), W and b fetched as a list. Its placeholders
    have no shape (``tf.placeholder(tf.float32)``), which tfc refuses with a clear error."""
    xs = np.linspace(0, 1, 10)
    ys = 3.0 * xs - 1.0
    with tf.Graph().as_default():
        X = tf.placeholder(tf.float64, name="X")
        Y = tf.placeholder(tf.float64, name="Y")
        W = tf.Variable(np.float64(0.3), name="W")
        b = tf.Variable(np.float64(-0.3), name="b")
        loss = tf.reduce_mean(tf.square(W * X + b - Y))
        train = tf.train.GradientDescentOptimizer(0.1).minimize(loss)
        init = tf.global_variables_initializer()
        sess = tf.Session()
        sess.run(init)
        for epoch in range(3):
            for xv, yv in zip(xs, ys):
                sess.run(train, feed_dict={X: float(xv), Y: float(yv)})
            rec(f"Wb{epoch}", sess.run([W, b]))
        rec("loss", sess.run(loss, {X: xs, Y: ys}))
        sess.close()


@program()
def logistic_regression_decay(tf: Any, rec: Rec) -> None:
    """Logistic regression: sigmoid_cross_entropy_with_logits, an L2 penalty through
    tf.nn.l2_loss, tf.train.exponential_decay on a non-trainable global_step that
    minimize increments, tf.sigmoid predictions thresholded with tf.greater."""
    rs = np.random.RandomState(10)
    x_data = rs.randn(50, 6)
    y_data = (x_data @ rs.randn(6, 1) > 0).astype(np.float64)
    with tf.Graph().as_default():
        x = tf.placeholder(tf.float64, [None, 6])
        y = tf.placeholder(tf.float64, [None, 1])
        W = tf.Variable(np.zeros((6, 1)))
        b = tf.Variable(np.zeros(1))
        logits = tf.matmul(x, W) + b
        loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(
            labels=y, logits=logits)) + 0.01 * tf.nn.l2_loss(W)
        global_step = tf.Variable(0, trainable=False, name="global_step")
        lr = tf.train.exponential_decay(1.0, global_step, decay_steps=5, decay_rate=0.5,
                                        staircase=True)
        train = tf.train.GradientDescentOptimizer(lr).minimize(loss, global_step=global_step)
        pred = tf.cast(tf.greater(tf.sigmoid(logits), 0.5), tf.float64)
        acc = tf.reduce_mean(tf.cast(tf.equal(pred, y), tf.float64))
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            for i in range(12):
                lr_v, _, lv = sess.run([lr, train, loss], {x: x_data, y: y_data})
                rec(f"lr{i}", lr_v)
                rec(f"loss{i}", lv)
            rec("global_step", sess.run(global_step))
            rec("acc", sess.run(acc, {x: x_data, y: y_data}))
            rec("W", sess.run(W))


@program()
def gradients_and_clipping(tf: Any, rec: Rec) -> None:
    """tf.gradients fetched directly; compute_gradients, clip_by_global_norm and
    apply_gradients by hand; tf.global_norm; an MLP with tanh."""
    rs = np.random.RandomState(11)
    x_data, t_data = rs.randn(20, 5), rs.randn(20, 2)
    with tf.Graph().as_default():
        x = tf.placeholder(tf.float64, [None, 5])
        t = tf.placeholder(tf.float64, [None, 2])
        W1 = tf.Variable(_init(12, 5, 8, scale=1.0))
        W2 = tf.Variable(_init(13, 8, 2, scale=1.0))
        out = tf.matmul(tf.tanh(tf.matmul(x, W1)), W2)
        loss = tf.reduce_mean(tf.reduce_sum(tf.square(out - t), axis=1))
        g1, g2 = tf.gradients(loss, [W1, W2])
        opt = tf.train.GradientDescentOptimizer(0.1)
        grads_and_vars = opt.compute_gradients(loss, var_list=[W1, W2])
        grads = [g for g, _ in grads_and_vars]
        clipped, norm = tf.clip_by_global_norm(grads, 1.0)
        train = opt.apply_gradients(zip(clipped, [v for _, v in grads_and_vars]))
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            a, bb = sess.run([g1, g2], {x: x_data, t: t_data})
            rec("g1", a)
            rec("g2", bb)
            rec("global_norm", sess.run(tf.global_norm([g1, g2]), {x: x_data, t: t_data}))
            for i in range(10):
                n, lv, _ = sess.run([norm, loss, train], {x: x_data, t: t_data})
                rec(f"norm{i}", n)
                rec(f"loss{i}", lv)
            rec("W2", sess.run(W2))


@program()
def variable_scopes(tf: Any, rec: Rec) -> None:
    """tf.variable_scope + tf.get_variable with numpy and tf.*_initializer initializers:
    two towers sharing weights through reuse=True, a third through
    get_variable_scope().reuse_variables(), nested scopes with AUTO_REUSE;
    tf.trainable_variables' names (TF's ":0" suffix dropped: tfc names have none)."""
    rs = np.random.RandomState(14)
    a_data, b_data = rs.randn(6, 3), rs.randn(6, 3)

    def tower(inp: Any) -> Any:
        w = tf.get_variable("w", initializer=_init(15, 3, 2, scale=1.0), dtype=tf.float64)
        bias = tf.get_variable("bias", [2], dtype=tf.float64,
                               initializer=tf.constant_initializer(0.25))
        return tf.matmul(inp, w) + bias

    def dense(inp: Any, n: int) -> Any:
        with tf.variable_scope("dense", reuse=tf.AUTO_REUSE):
            k = tf.get_variable("kernel", [int(inp.shape[1]), n], dtype=tf.float64,
                                initializer=tf.constant_initializer(
                                    _init(27, int(inp.shape[1]), n, scale=1.0)))
            z = tf.get_variable("bias", [n], dtype=tf.float64,
                                initializer=tf.zeros_initializer())
            return tf.nn.relu(tf.matmul(inp, k) + z)

    with tf.Graph().as_default():
        a = tf.placeholder(tf.float64, [None, 3])
        b = tf.placeholder(tf.float64, [None, 3])
        with tf.variable_scope("tower"):
            ya = tower(a)
        with tf.variable_scope("tower", reuse=True):
            yb = tower(b)
        with tf.variable_scope("tower") as scope:
            scope.reuse_variables()
            yc = tower(a + b)
        with tf.variable_scope("head"):
            ha, hb = dense(ya, 4), dense(yb, 4)
        loss = tf.reduce_mean(tf.square(ha - hb)) + tf.reduce_mean(tf.square(yc))
        train = tf.train.GradientDescentOptimizer(0.5).minimize(loss)
        rec("trainable", sorted(v.name.split(":")[0] for v in tf.trainable_variables()))
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            for i in range(5):
                rec(f"loss{i}", sess.run([loss, train], {a: a_data, b: b_data})[0])


@program()
def assigns_and_groups(tf: Any, rec: Rec) -> None:
    """State by hand: tf.assign, tf.assign_add, Variable.assign_sub, tf.group,
    tf.identity, tf.control_dependencies around an update; values read in later steps."""
    with tf.Graph().as_default():
        counter = tf.Variable(0, name="counter")
        total = tf.Variable(np.float64(0.0), name="total")
        x = tf.placeholder(tf.float64, [])
        inc = tf.assign_add(counter, 1)
        acc = tf.assign(total, total + x)
        step = tf.group(inc, acc)
        with tf.control_dependencies([step]):
            tick = tf.no_op()
        ident = tf.identity(total * 2.0)
        down = counter.assign_sub(3)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            for i in range(4):
                sess.run(tick, {x: float(i) + 0.5})
                rec(f"state{i}", sess.run([counter, total, ident]))
            sess.run(down)
            rec("after_sub", sess.run(counter))
            sess.run(tf.global_variables_initializer())
            rec("reinit", sess.run([counter, total]))


@program()
def saver_round_trip(tf: Any, rec: Rec) -> None:
    """tf.train.Saver: train, save, change the variables, restore, compare; a second
    session restores into a fresh graph session without running the initializer."""
    rs = np.random.RandomState(16)
    x_data, y_data = rs.randn(10, 3), rs.randn(10, 1)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "model.ckpt")
        with tf.Graph().as_default():
            x = tf.placeholder(tf.float64, [None, 3])
            y = tf.placeholder(tf.float64, [None, 1])
            W = tf.Variable(_init(17, 3, 1, scale=1.0), name="W")
            b = tf.Variable(np.zeros(1), name="b")
            loss = tf.reduce_mean(tf.square(tf.matmul(x, W) + b - y))
            train = tf.train.GradientDescentOptimizer(0.1).minimize(loss)
            saver = tf.train.Saver()
            with tf.Session() as sess:
                sess.run(tf.global_variables_initializer())
                for _ in range(3):
                    sess.run(train, {x: x_data, y: y_data})
                rec("saved_W", sess.run(W))
                saver.save(sess, path)
                sess.run(W.assign(np.zeros((3, 1))))
                rec("zeroed_W", sess.run(W))
                saver.restore(sess, path)
                rec("restored_W", sess.run(W))
                rec("restored_loss", sess.run(loss, {x: x_data, y: y_data}))
            with tf.Session() as sess2:
                saver.restore(sess2, path)
                rec("session2_Wb", sess2.run([W, b]))


@program()
def cond_and_while(tf: Any, rec: Rec) -> None:
    """tf.cond on a fed bool (a train/test switch), tf.while_loop summing a series with
    two loop variables, tf.where, tf.maximum, gradients through the cond."""
    with tf.Graph().as_default():
        is_train = tf.placeholder(tf.bool, [])
        x = tf.placeholder(tf.float64, [None])
        v = tf.Variable(np.array([0.5, -1.0, 2.0]))
        y = tf.cond(is_train, lambda: x * v * 2.0, lambda: x + v)
        grad = tf.gradients(tf.reduce_sum(y), v)[0]
        i0, s0 = tf.constant(0), tf.constant(np.float64(0.0))
        i_end, s_end = tf.while_loop(lambda i, s: i < 10,
                                     lambda i, s: (i + 1, s + tf.cast(i, tf.float64) ** 2),
                                     [i0, s0])
        clipped = tf.where(x > 0.0, tf.maximum(x, 1.0), tf.zeros_like(x))
        xs = np.array([1.5, -2.0, 0.25])
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            for flag in (True, False):
                rec(f"y_{flag}", sess.run(y, {is_train: flag, x: xs}))
                rec(f"grad_{flag}", sess.run(grad, {is_train: flag, x: xs}))
            rec("while", sess.run([i_end, s_end]))
            rec("where", sess.run(clipped, {x: xs}))


@program()
def skipgram_embeddings(tf: Any, rec: Rec) -> None:
    """A word2vec-like skip-gram with a full softmax: tf.nn.embedding_lookup of a
    variable (a sparse gradient), sparse labels, Adagrad; a cosine-similarity readout with
    tf.sqrt/reduce_sum(keepdims)/matmul(transpose_b)."""
    rs = np.random.RandomState(18)
    vocab, dim = 12, 4
    centers = rs.randint(0, vocab, 30)
    contexts = (centers + rs.randint(1, 3, 30)) % vocab
    with tf.Graph().as_default():
        inputs = tf.placeholder(tf.int32, [None])
        labels = tf.placeholder(tf.int32, [None])
        emb = tf.Variable(_init(19, vocab, dim, scale=0.5))
        out_w = tf.Variable(_init(20, dim, vocab, scale=0.5))
        embed = tf.nn.embedding_lookup(emb, inputs)
        logits = tf.matmul(embed, out_w)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=labels, logits=logits))
        train = tf.train.AdagradOptimizer(0.5).minimize(loss)
        norm = tf.sqrt(tf.reduce_sum(tf.square(emb), 1, keepdims=True))
        normalized = emb / norm
        sim = tf.matmul(tf.gather(normalized, [0, 1]), normalized, transpose_b=True)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            feed = {inputs: centers.astype(np.int32), labels: contexts.astype(np.int32)}
            for i in range(10):
                _, lv = sess.run([train, loss], feed)
                rec(f"loss{i}", lv)
            rec("sim", sess.run(sim))
            rec("emb", sess.run(emb))


@program()
def batch_norm_by_hand(tf: Any, rec: Rec) -> None:
    """Batch normalization written out: tf.nn.moments, tf.nn.batch_normalization, then
    concat/stack/tile/gather/one_hot/reduce_max on the result, Momentum training."""
    rs = np.random.RandomState(21)
    x_data = rs.randn(16, 5) * 3.0 + 1.0
    t_data = rs.randn(16, 1)
    with tf.Graph().as_default():
        x = tf.placeholder(tf.float64, [None, 5])
        t = tf.placeholder(tf.float64, [None, 1])
        gamma = tf.Variable(np.ones(5))
        beta = tf.Variable(np.zeros(5))
        mean, var = tf.nn.moments(x, axes=[0])
        bn = tf.nn.batch_normalization(x, mean, var, beta, gamma, 1e-3)
        manual = gamma * (x - mean) / tf.sqrt(var + 1e-3) + beta
        W = tf.Variable(_init(22, 5, 1, scale=1.0))
        loss = tf.reduce_mean(tf.square(tf.matmul(bn, W) - t))
        train = tf.train.MomentumOptimizer(0.1, momentum=0.9).minimize(loss)
        both = tf.concat([bn, manual], axis=1)
        stacked = tf.stack([mean, var])
        tiled = tf.tile(tf.expand_dims(mean, 0), [2, 1])
        picked = tf.gather(bn, [3, 0, 3])
        hot = tf.one_hot([0, 2, 4], 5, dtype=tf.float64) * tf.reduce_max(bn, axis=0)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            vals = sess.run([both, stacked, tiled, picked, hot], {x: x_data})
            for name, val in zip(["both", "stacked", "tiled", "picked", "hot"], vals):
                rec(name, val)
            for i in range(10):
                rec(f"loss{i}", sess.run([loss, train], {x: x_data, t: t_data})[0])
            rec("gamma", sess.run(gamma))


def _mlp(tf: Any, rec: Rec, make_opt: Callable[[], Any]) -> None:
    rs = np.random.RandomState(23)
    x_data = rs.randn(32, 6)
    y_data = np.eye(3)[rs.randint(0, 3, 32)]
    with tf.Graph().as_default():
        x = tf.placeholder(tf.float64, [None, 6])
        y = tf.placeholder(tf.float64, [None, 3])
        W1 = tf.Variable(_init(24, 6, 10, scale=0.5))
        b1 = tf.Variable(np.zeros(10))
        W2 = tf.Variable(_init(25, 10, 3, scale=0.5))
        b2 = tf.Variable(np.zeros(3))
        h = tf.nn.relu(tf.matmul(x, W1) + b1)
        logits = tf.matmul(h, W2) + b2
        loss = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits_v2(
            labels=y, logits=logits))
        train = make_opt().minimize(loss)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            for i in range(20):
                _, lv = sess.run([train, loss], {x: x_data, y: y_data})
                rec(f"loss{i}", lv)
            rec("W1", sess.run(W1))
            rec("b2", sess.run(b2))


@program()
def mlp_momentum_nesterov(tf: Any, rec: Rec) -> None:
    """MomentumOptimizer(use_nesterov=True) on a two-layer ReLU MLP, 20 steps."""
    _mlp(tf, rec, lambda: tf.train.MomentumOptimizer(0.1, 0.9, use_nesterov=True))


@program()
def mlp_rmsprop(tf: Any, rec: Rec) -> None:
    """RMSPropOptimizer with momentum and centered, 20 steps."""
    _mlp(tf, rec, lambda: tf.train.RMSPropOptimizer(0.01, decay=0.9, momentum=0.5,
                                                    centered=True))


@program()
def mlp_adagrad(tf: Any, rec: Rec) -> None:
    """AdagradOptimizer, 20 steps."""
    _mlp(tf, rec, lambda: tf.train.AdagradOptimizer(0.3))


@program(expected="tfc's Adam keeps float64 beta powers (TF1's are float32 variables: "
                  "AdamOptimizer docstring)")
def mlp_adam(tf: Any, rec: Rec) -> None:
    """AdamOptimizer with its defaults but the learning rate, 20 steps."""
    _mlp(tf, rec, lambda: tf.train.AdamOptimizer(learning_rate=0.05))


@program()
def math_idioms(tf: Any, rec: Rec) -> None:
    """Odds and ends real programs use: tf.clip_by_value, tf.log with an epsilon, tf.abs,
    tf.reduce_max/min/prod, tf.argmin, tf.shape of a fed tensor, tf.range, tf.size,
    tf.square, tf.exp, tf.split, tf.transpose, tf.reduce_any/all, tf.count_nonzero."""
    rs = np.random.RandomState(26)
    x_data = rs.randn(4, 6)
    with tf.Graph().as_default():
        x = tf.placeholder(tf.float64, [None, 6])
        p = tf.clip_by_value(tf.nn.softmax(x), 1e-10, 1.0)
        ent = -tf.reduce_sum(p * tf.log(p), axis=1)
        parts = tf.split(x, 3, axis=1)
        fetches = {
            "ent": ent,
            "abs_max": tf.reduce_max(tf.abs(x), axis=0),
            "min": tf.reduce_min(x),
            "prod": tf.reduce_prod(tf.exp(x * 0.1), axis=1),
            "argmin": tf.argmin(x, axis=1),
            "shape": tf.shape(x),
            "range": tf.range(2, 11, 3),
            "size": tf.size(x),
            "split1": parts[1],
            "t": tf.transpose(x),
            "any": tf.reduce_any(x > 2.0, axis=1),
            "all": tf.reduce_all(x > -3.0),
            "nonzero": tf.count_nonzero(x > 0.0, axis=1),
        }
        with tf.Session() as sess:
            vals = sess.run(fetches, {x: x_data})
            for k in sorted(vals):
                rec(k, vals[k])


@program(tol=(2e-6, 1e-7))
def losses_module(tf: Any, rec: Rec) -> None:
    """tf.losses (float32 inside, as TF1 computes them): mean_squared_error with per-example
    weights, absolute_difference, softmax_cross_entropy with label smoothing,
    sparse_softmax_cross_entropy with [batch, 1] labels, sigmoid_cross_entropy; tf.math.*
    spellings; an MLP trained on their sum. The float32 inside makes float32 tolerances."""
    rs = np.random.RandomState(28)
    x_data = rs.randn(12, 4)
    ids = rs.randint(0, 3, (12, 1)).astype(np.int32)
    w_data = (rs.rand(12, 1) > 0.3).astype(np.float64)
    with tf.Graph().as_default():
        x = tf.placeholder(tf.float64, [None, 4])
        y = tf.placeholder(tf.int32, [None, 1])
        wts = tf.placeholder(tf.float64, [None, 1])
        W = tf.Variable(_init(29, 4, 3, scale=1.0))
        logits = tf.matmul(x, W)
        onehot = tf.one_hot(tf.squeeze(y, [1]), 3, dtype=tf.float64)
        probs = tf.math.sigmoid(logits)
        parts = {
            "mse": tf.losses.mean_squared_error(onehot, probs, weights=wts),
            "abs": tf.losses.absolute_difference(onehot, probs),
            "xent": tf.losses.softmax_cross_entropy(onehot, logits, label_smoothing=0.1),
            "sparse": tf.losses.sparse_softmax_cross_entropy(y, logits),
            "sigmoid": tf.losses.sigmoid_cross_entropy(onehot, logits),
            "math": tf.math.reduce_mean(tf.math.log(tf.math.exp(logits) + 1.0)),
        }
        # (mean_squared_error and absolute_difference are float32: TF1 casts their inputs)
        total = tf.add_n([tf.cast(p, tf.float64) for p in parts.values()])
        step = tf.Variable(0, trainable=False)
        tf.add_to_collection(tf.GraphKeys.UPDATE_OPS, tf.assign_add(step, 1))
        with tf.control_dependencies(tf.get_collection(tf.GraphKeys.UPDATE_OPS)):
            train = tf.train.GradientDescentOptimizer(0.2).minimize(total)
        n_losses = len(tf.losses.get_losses())
        n_trainable = len(tf.get_collection(tf.GraphKeys.TRAINABLE_VARIABLES))
        feed = {x: x_data, y: ids, wts: w_data}
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            vals = sess.run(parts, feed)
            for k in sorted(vals):
                rec(k, vals[k])
            for i in range(5):
                rec(f"total{i}", sess.run([total, train], feed)[0])
            rec("counts", [n_losses, n_trainable])
            rec("step", sess.run(step))


@program()
def activations_mlp(tf: Any, rec: Rec) -> None:
    """The tf.nn activations beyond relu (leaky_relu, relu6, elu, selu, softsign) and
    l2_normalize/xw_plus_b: values at special points, gradients, and an MLP trained with
    them, float64."""
    rs = np.random.RandomState(33)
    x_data = rs.randn(10, 4) * 4.0
    t_data = rs.randn(10, 2)
    pts = np.array([-50.0, -1.0, -1e-3, 0.0, 1e-3, 0.5, 5.99, 6.0, 7.0, 900.0])
    with tf.Graph().as_default():
        p = tf.placeholder(tf.float64, [None])
        acts = {"leaky": tf.nn.leaky_relu(p, alpha=0.1), "relu6": tf.nn.relu6(p),
                "elu": tf.nn.elu(p), "selu": tf.nn.selu(p), "softsign": tf.nn.softsign(p)}
        grads = {k: tf.gradients(tf.reduce_sum(v), p)[0] for k, v in acts.items()}
        x = tf.placeholder(tf.float64, [None, 4])
        t = tf.placeholder(tf.float64, [None, 2])
        W1 = tf.Variable(_init(34, 4, 6, scale=0.7))
        b1 = tf.Variable(np.zeros(6))
        W2 = tf.Variable(_init(35, 6, 2, scale=0.7))
        h = tf.nn.elu(tf.nn.xw_plus_b(x, W1, b1))
        h = tf.nn.leaky_relu(h, alpha=0.3) + tf.nn.relu6(h) + tf.nn.selu(h)
        out = tf.nn.l2_normalize(tf.matmul(tf.nn.softsign(h), W2), axis=1)
        loss = tf.reduce_mean(tf.square(out - t))
        train = tf.train.MomentumOptimizer(0.2, 0.5).minimize(loss)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            vals, gvals = sess.run([acts, grads], {p: pts})
            for k in sorted(vals):
                rec(k, vals[k])
                rec(f"d_{k}", gvals[k])
            for i in range(10):
                rec(f"loss{i}", sess.run([loss, train], {x: x_data, t: t_data})[0])
            rec("W1", sess.run(W1))


@program()
def random_initializers(tf: Any, rec: Rec) -> None:
    """Variables initialized the TF1 way, from tf.truncated_normal, tf.random_normal,
    tf.random_uniform (maxval=None) and tf.random_shuffle with seeds. The two frameworks
    draw different numbers, so what is compared is what TF1 promises: shapes, dtypes,
    bounds (truncated at 2 stddev, uniform in [min, max)), statistics within 5 sigma of
    the sample, a permutation."""
    with tf.Graph().as_default():
        tf.set_random_seed(1234)
        W = tf.Variable(tf.truncated_normal([400, 50], stddev=0.1))
        b = tf.Variable(tf.random_normal([20000], mean=1.0, stddev=2.0, dtype=tf.float64))
        u = tf.Variable(tf.random_uniform([5000], minval=-3.0, maxval=None))
        perm = tf.random_shuffle(tf.range(100))
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            wv, bv, uv, pv = sess.run([W, b, u, perm])
    rec("dtypes", [str(a.dtype) for a in (wv, bv, uv, pv)])
    rec("shapes", [list(a.shape) for a in (wv, bv, uv, pv)])
    n = wv.size
    # a normal truncated at +-2 sigma has std 0.8796 sigma
    rec("truncated", [bool(np.all(np.abs(wv) <= 0.2)), bool(abs(wv.mean()) < 5 * 0.088 / n ** .5),
                      bool(abs(wv.std() - 0.08796) < 0.003)])
    rec("normal", [bool(abs(bv.mean() - 1.0) < 5 * 2.0 / bv.size ** .5),
                   bool(abs(bv.std() - 2.0) < 0.05)])
    rec("uniform", [bool(uv.min() >= -3.0), bool(uv.max() < 1.0),
                    bool(abs(uv.mean() + 1.0) < 5 * (16 / 12 / uv.size) ** .5)])
    rec("permutation", sorted(pv.tolist()) == list(range(100)))


@program(expected="tfc's assign is an operation, fetching it gives None (README)")
def assign_returns_value(tf: Any, rec: Rec) -> None:
    """sess.run of tf.assign_add: TF1 returns the variable's new value."""
    with tf.Graph().as_default():
        v = tf.Variable(np.float64(1.0))
        inc = tf.assign_add(v, 2.0)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            rec("fetched", sess.run(inc))
            rec("after", sess.run(v))


# ---- tf.layers, tf.metrics, tf.nn.nce_loss (TF1's functional layers: tf_keras in TF 2.x) --

def _names(variables: Any) -> list[str]:
    return [v.name.split(":")[0] for v in variables]


@program()
def layers_dense_mlp(tf: Any, rec: Rec) -> None:
    """tf.layers.dense twice (relu, then logits) with constant_initializer kernels, a third
    call sharing the first layer's variables (name=, reuse=True), gradient descent; the
    variables' names (dense/kernel ...), trainable and global, as Saver would see them."""
    x_data, labels = _data(40, 48, 6, 3)
    with tf.Graph().as_default():
        x = tf.placeholder(tf.float64, [None, 6])
        y = tf.placeholder(tf.int64, [None])
        h = tf.layers.dense(x, 8, activation=tf.nn.relu, name="hidden",
                            kernel_initializer=tf.constant_initializer(_init(41, 6, 8)))
        logits = tf.layers.dense(h, 3, kernel_initializer=tf.constant_initializer(
            _init(42, 8, 3)), bias_initializer=tf.constant_initializer(0.1))
        again = tf.layers.dense(x, 8, activation=tf.nn.relu, name="hidden", reuse=True)
        extra = tf.layers.dense(h, 2, use_bias=False,
                                kernel_initializer=tf.constant_initializer(_init(43, 8, 2)))
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=y, logits=logits)) + 0.01 * tf.reduce_sum(tf.square(extra))
        train = tf.train.GradientDescentOptimizer(0.3).minimize(loss)
        rec("trainable", _names(tf.trainable_variables()))
        rec("global", _names(tf.global_variables()))
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            for i in range(12):
                rec(f"loss{i}", sess.run([train, loss], {x: x_data, y: labels})[1])
            h_v, again_v = sess.run([h, again], {x: x_data})
            rec("shared", np.array_equal(h_v, again_v))
            rec("vars", sess.run(tf.trainable_variables()))


@program(tol=F32)
def layers_cnn(tf: Any, rec: Rec) -> None:
    """The tf.layers CNN of the TF1 tutorials on 8x8 images: conv2d ('same', relu),
    max_pooling2d, conv2d ('valid', strides), average_pooling2d, flatten, dense, dropout
    with a bool training placeholder (fed False: no random mask decides the numbers), Adam,
    float32."""
    rs = np.random.RandomState(44)
    x_data = rs.rand(16, 8, 8, 1).astype(np.float32)
    labels = rs.randint(0, 3, 16)

    def k(seed: int, *shape: int) -> Any:
        return tf.constant_initializer(_init(seed, *shape, scale=0.3).astype(np.float32))

    with tf.Graph().as_default():
        x = tf.placeholder(tf.float32, [None, 8, 8, 1])
        y = tf.placeholder(tf.int32, [None])
        training = tf.placeholder(tf.bool, [])
        c1 = tf.layers.conv2d(x, 4, 3, padding="same", activation=tf.nn.relu,
                              kernel_initializer=k(45, 3, 3, 1, 4))
        p1 = tf.layers.max_pooling2d(c1, pool_size=2, strides=2)
        c2 = tf.layers.conv2d(p1, 6, (2, 2), strides=(1, 1), activation=tf.nn.relu,
                              kernel_initializer=k(46, 2, 2, 4, 6),
                              bias_initializer=tf.constant_initializer(0.05))
        p2 = tf.layers.average_pooling2d(c2, pool_size=(2, 2), strides=1, padding="same")
        flat = tf.layers.flatten(p2)
        fc = tf.layers.dense(flat, 10, activation=tf.nn.relu, kernel_initializer=k(47, 54, 10))
        drop = tf.layers.dropout(fc, rate=0.4, training=training)
        logits = tf.layers.dense(drop, 3, kernel_initializer=k(48, 10, 3))
        loss = tf.losses.sparse_softmax_cross_entropy(labels=y, logits=logits)
        train = tf.train.AdamOptimizer(1e-2).minimize(loss)
        rec("trainable", _names(tf.trainable_variables()))
        rec("shapes", [[int(d) for d in list(t.shape)[1:]] for t in (c1, p1, c2, p2, flat)])
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            for i in range(6):
                rec(f"loss{i}", sess.run([train, loss], {x: x_data, y: labels.astype(
                    np.int32), training: False})[1])
            rec("logits", sess.run(logits, {x: x_data, training: False}))
            rec("conv2d/kernel", sess.run(tf.trainable_variables()[0]))


@program()
def layers_batch_norm(tf: Any, rec: Rec) -> None:
    """tf.layers.batch_normalization between dense layers with a bool training placeholder,
    the UPDATE_OPS idiom (control_dependencies around minimize), then inference with the
    moving averages; momentum and epsilon given and defaulted, float64 (TF's non-fused
    path)."""
    x_data, labels = _data(49, 32, 5, 3)
    with tf.Graph().as_default():
        x = tf.placeholder(tf.float64, [None, 5])
        y = tf.placeholder(tf.int64, [None])
        training = tf.placeholder(tf.bool, [])
        h = tf.layers.dense(x, 6, kernel_initializer=tf.constant_initializer(_init(50, 5, 6)))
        bn = tf.nn.relu(tf.layers.batch_normalization(h, training=training, momentum=0.9))
        logits = tf.layers.dense(bn, 3, kernel_initializer=tf.constant_initializer(
            _init(51, 6, 3)))
        bn2 = tf.layers.batch_normalization(logits, training=True, center=False)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=y, logits=logits + 0.1 * bn2))
        update_ops = tf.get_collection(tf.GraphKeys.UPDATE_OPS)
        rec("update_ops", len(update_ops))
        with tf.control_dependencies(update_ops):
            train = tf.train.GradientDescentOptimizer(0.2).minimize(loss)
        rec("global", _names(tf.global_variables()))
        rec("trainable", _names(tf.trainable_variables()))
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            for i in range(8):
                batch = slice(8 * (i % 4), 8 * (i % 4) + 8)
                rec(f"loss{i}", sess.run([train, loss], {x: x_data[batch], y: labels[batch],
                                                         training: True})[1])
            rec("eval_loss", sess.run(loss, {x: x_data, y: labels, training: False}))
            rec("moving", sess.run([v for v in tf.global_variables() if "moving" in v.name]))
            sess.run(update_ops, {x: x_data, training: False})  # (no change when not training)
            rec("moving_after_eval", sess.run(
                [v for v in tf.global_variables() if "moving" in v.name]))


@program(tol=F32)
def layers_batch_norm_conv(tf: Any, rec: Rec) -> None:
    """batch_normalization of a conv2d's NHWC output in float32 (TF's fused kernel) with
    training=True, the update ops run with the train op through tf.group; then inference
    with training=False (a Python bool) in a second call sharing the variables (reuse)."""
    rs = np.random.RandomState(52)
    x_data = rs.rand(8, 6, 6, 2).astype(np.float32)
    target = rs.rand(8, 1).astype(np.float32)
    with tf.Graph().as_default():
        x = tf.placeholder(tf.float32, [None, 6, 6, 2])
        t = tf.placeholder(tf.float32, [None, 1])
        c = tf.layers.conv2d(x, 3, 3, kernel_initializer=tf.constant_initializer(
            _init(53, 3, 3, 2, 3, scale=0.5).astype(np.float32)))
        bn = tf.layers.batch_normalization(c, training=True, name="bn")
        bn_eval = tf.layers.batch_normalization(c, training=False, name="bn", reuse=True)
        out = tf.layers.dense(tf.layers.flatten(tf.nn.relu(bn)), 1,
                              kernel_initializer=tf.constant_initializer(0.05))
        loss = tf.reduce_mean(tf.square(out - t))
        opt = tf.train.GradientDescentOptimizer(0.1).minimize(loss)
        train = tf.group(opt, *tf.get_collection(tf.GraphKeys.UPDATE_OPS))
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            for i in range(5):
                rec(f"loss{i}", sess.run([train, loss], {x: x_data, t: target})[1])
            rec("moving", sess.run([v for v in tf.global_variables() if "moving" in v.name]))
            rec("bn_eval", sess.run(bn_eval, {x: x_data}))


@program(tol=F32)
def metrics_streaming(tf: Any, rec: Rec) -> None:
    """Streaming evaluation with tf.metrics (accuracy, mean, mean_squared_error,
    mean_absolute_error, precision, recall, auc (ROC, PR, given thresholds with
    minoring); weights on some): update_op run per batch
    (its fetched value is the running metric), the values read after, the local variables
    reset with local_variables_initializer and a second pass; their names, and that they
    are neither global nor trainable."""
    rs = np.random.RandomState(54)
    lab = rs.randint(0, 2, 40)
    pred = np.where(rs.rand(40) < 0.7, lab, 1 - lab)
    reg_t, reg_p = rs.randn(40), rs.randn(40)
    w = rs.rand(40)
    score = np.clip(0.4 * lab + 0.6 * rs.rand(40), 0, 1).astype(np.float32)
    with tf.Graph().as_default():
        labels = tf.placeholder(tf.int64, [None])
        preds = tf.placeholder(tf.int64, [None])
        rt = tf.placeholder(tf.float64, [None])
        rp = tf.placeholder(tf.float64, [None])
        weights = tf.placeholder(tf.float64, [None])
        scores = tf.placeholder(tf.float32, [None])
        acc, acc_op = tf.metrics.accuracy(labels=labels, predictions=preds)
        wacc, wacc_op = tf.metrics.accuracy(labels, preds, weights=weights)
        mean, mean_op = tf.metrics.mean(rp)
        mse, mse_op = tf.metrics.mean_squared_error(rt, rp)
        mae, mae_op = tf.metrics.mean_absolute_error(rt, rp, name="my_mae")
        prec, prec_op = tf.metrics.precision(labels, preds)
        rcl, rcl_op = tf.metrics.recall(labels, preds)
        auc, auc_op = tf.metrics.auc(labels, scores)
        pr_auc, pr_auc_op = tf.metrics.auc(labels, scores, weights=weights, curve="PR",
                                           num_thresholds=50)
        minor, minor_op = tf.metrics.auc(labels, scores, thresholds=[0.7, 0.2, 0.5],
                                         summation_method="minoring")
        values = [acc, wacc, mean, mse, mae, prec, rcl, auc, pr_auc, minor]
        updates = [acc_op, wacc_op, mean_op, mse_op, mae_op, prec_op, rcl_op, auc_op,
                   pr_auc_op, minor_op]
        rec("local", _names(tf.local_variables()))
        rec("n_global", len(tf.global_variables()))
        rec("n_trainable", len(tf.trainable_variables()))
        with tf.Session() as sess:
            sess.run([tf.global_variables_initializer(), tf.local_variables_initializer()])
            rec("empty", sess.run(values))
            for rnd in range(2):
                for i in range(4):
                    b = slice(10 * i, 10 * i + 10)
                    rec(f"update{rnd}_{i}", sess.run(updates, {
                        labels: lab[b], preds: pred[b], rt: reg_t[b], rp: reg_p[b],
                        weights: w[b], scores: score[b]}))
                rec(f"values{rnd}", sess.run(values))
                sess.run(tf.local_variables_initializer())
            rec("reset", sess.run(values))


@program(tol=F32)
def layers_conv_autoencoder(tf: Any, rec: Rec) -> None:
    """A tf.layers convolutional autoencoder (conv25): conv2d (stride 2, 'same'),
    separable_conv2d (depth multiplier 2), conv2d_transpose back to 8x8 (stride 2,
    'same'), plus a conv1d over the image rows as a penalty; constant initializers,
    Adam on the reconstruction error, float32."""
    rs = np.random.RandomState(61)
    x_data = rs.rand(6, 8, 8, 1).astype(np.float32)

    def k(seed: int, *shape: int) -> Any:
        return tf.constant_initializer(_init(seed, *shape, scale=0.3).astype(np.float32))

    with tf.Graph().as_default():
        x = tf.placeholder(tf.float32, [None, 8, 8, 1])
        enc = tf.layers.conv2d(x, 4, 3, strides=2, padding="same", activation=tf.nn.relu,
                               kernel_initializer=k(62, 3, 3, 1, 4))
        sep = tf.layers.separable_conv2d(enc, 3, 3, padding="same", depth_multiplier=2,
                                         activation=tf.nn.relu,
                                         depthwise_initializer=k(63, 3, 3, 4, 2),
                                         pointwise_initializer=k(64, 1, 1, 8, 3),
                                         bias_initializer=tf.constant_initializer(0.05))
        dec = tf.layers.conv2d_transpose(sep, 1, 3, strides=2, padding="same",
                                         kernel_initializer=k(65, 3, 3, 1, 3))
        rows = tf.layers.conv1d(tf.reshape(x, [-1, 8, 8]), 2, 3, padding="same",
                                kernel_initializer=k(66, 3, 8, 2))
        loss = tf.reduce_mean(tf.square(dec - x)) + 0.01 * tf.reduce_mean(tf.square(rows))
        train = tf.train.AdamOptimizer(1e-2).minimize(loss)
        rec("trainable", _names(tf.trainable_variables()))
        rec("shapes", [[int(d) for d in list(t.shape)[1:]] for t in (enc, sep, dec, rows)])
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            for i in range(6):
                rec(f"loss{i}", sess.run([train, loss], {x: x_data})[1])
            rec("decoded", sess.run(dec, {x: x_data}))
            rec("variables", sess.run(tf.trainable_variables()))


@program()
def nce_word2vec(tf: Any, rec: Rec) -> None:
    """The word2vec tutorial's skip-gram step: embedding_lookup of the center words,
    tf.nn.nce_loss against nce_weights/nce_biases, SGD; the sampled classes given through
    sampled_values (log-uniform expected counts computed here) so that no sampler decides
    the numbers, one of them equal to a label; remove_accidental_hits both ways."""
    vocab, dim, num_sampled, batch = 20, 4, 5, 8
    rs = np.random.RandomState(55)
    centers = rs.randint(0, vocab, batch)
    context = rs.randint(0, vocab, (batch, 1))
    sampled = np.array([3, 0, 11, int(context[0, 0]), 7])

    def expected(ids: np.ndarray) -> np.ndarray:  # num_sampled * P(id), log-uniform
        return num_sampled * np.log((ids + 2.0) / (ids + 1.0)) / np.log(vocab + 1.0)

    with tf.Graph().as_default():
        inputs = tf.placeholder(tf.int32, [None])
        ctx = tf.placeholder(tf.int64, [None, 1])
        embeddings = tf.Variable(rs.uniform(-1.0, 1.0, (vocab, dim)))
        nce_w = tf.Variable(rs.randn(vocab, dim) / np.sqrt(dim))
        nce_b = tf.Variable(np.zeros(vocab))
        embed = tf.nn.embedding_lookup(embeddings, inputs)
        sv = (tf.constant(sampled, dtype=tf.int64), tf.constant(expected(context)),
              tf.constant(expected(sampled)))
        loss = tf.reduce_mean(tf.nn.nce_loss(weights=nce_w, biases=nce_b, labels=ctx,
                                             inputs=embed, num_sampled=num_sampled,
                                             num_classes=vocab, sampled_values=sv))
        per_example = tf.nn.nce_loss(nce_w, nce_b, ctx, embed, num_sampled, vocab,
                                     sampled_values=sv, remove_accidental_hits=True)
        train = tf.train.GradientDescentOptimizer(0.5).minimize(loss)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            feed = {inputs: centers.astype(np.int32), ctx: context}
            rec("per_example_hits_removed", sess.run(per_example, feed))
            for i in range(6):
                rec(f"loss{i}", sess.run([train, loss], feed)[1])
            rec("embeddings", sess.run(embeddings))
            rec("nce_biases", sess.run(nce_b))


# ---- running and comparing ---------------------------------------------------------------

@dataclass
class Outcome:
    values: list[tuple[str, Any]] = field(default_factory=list)
    error: str = ""      # "" when the program ran to the end
    kind: str = ""       # "not supported", "tfc error", "CRASH"


def run_program(prog: Program, tf: Any, is_tfc: bool) -> Outcome:
    out = Outcome()

    def rec(label: str, value: Any) -> None:
        out.values.append((label, value))

    try:
        prog.fn(tf, rec)
    except AttributeError as e:
        if not is_tfc:
            out.kind, out.error = "TF cannot run it", f"{type(e).__name__}: {e}"
            return out
        obj = getattr(e, "obj", None)
        where = getattr(obj, "__name__", type(obj).__name__)
        out.kind, out.error = "not supported", f"{where}.{e.name}" if e.name else str(e)
    except tfc.TfcError as e:
        out.kind, out.error = "tfc error", str(e).splitlines()[0]
    except Exception as e:  # noqa: BLE001  (a traceback from inside tfc: report it)
        if not is_tfc:
            out.kind, out.error = "TF cannot run it", f"{type(e).__name__}: {e}"
            return out
        tb = traceback.extract_tb(e.__traceback__)[-1]
        out.kind = "CRASH"
        out.error = f"{type(e).__name__}: {e} ({os.path.basename(tb.filename)}:{tb.lineno})"
    return out


def _leaves(v: Any) -> list[Any]:
    if isinstance(v, (list, tuple)):
        return [x for item in v for x in _leaves(item)]
    return [v]


def compare(want: Any, got: Any, tol: tuple[float, float]) -> str:
    """'' if ``got`` matches ``want`` (TensorFlow's), else what differs."""
    if isinstance(want, str) or (isinstance(want, list) and want and isinstance(want[0], str)):
        return "" if want == got else f"{got!r} != tf {want!r}"
    w_leaves, g_leaves = _leaves(want), _leaves(got)
    if len(w_leaves) != len(g_leaves):
        return f"{len(g_leaves)} values != tf {len(w_leaves)}"
    for w, g in zip(w_leaves, g_leaves):
        if w is None or g is None:
            if w is g:
                continue
            return f"{g!r} != tf {w!r}"
        w, g = np.asarray(w), np.asarray(g)
        if w.shape != g.shape:
            return f"shape {g.shape} != tf {w.shape}"
        if w.dtype.kind in "biu" or g.dtype.kind in "biu":
            if w.dtype.kind != g.dtype.kind and not (w.dtype.kind in "iu" and g.dtype.kind
                                                       in "iu"):
                return f"dtype {g.dtype} != tf {w.dtype}"
            if not np.array_equal(w, g):
                return f"{g.ravel()[:4]} != tf {w.ravel()[:4]}"
            continue
        rtol, atol = tol
        bad = ~np.isclose(g, w, rtol=rtol, atol=atol, equal_nan=True)
        if bad.any():
            i = int(np.argmax(bad.ravel()))
            gi, wi = g.ravel()[i], w.ravel()[i]
            rel = abs(gi - wi) / max(abs(wi), 1e-300)
            return f"at flat {i}: tfc {gi!r} tf {wi!r} (rel {rel:.2g})"
        if g.dtype != w.dtype:
            return f"dtype {g.dtype} != tf {w.dtype}"
    return ""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--programs", default="")
    ap.add_argument("--backends", default="llvm,reference")
    args = ap.parse_args(argv)
    chosen = [p for p in PROGRAMS if not args.programs or p.name in args.programs.split(",")]
    backends = [b for b in args.backends.split(",") if b]

    t0 = time.perf_counter()
    import tensorflow as tensorflow_module
    tf1 = tensorflow_module.compat.v1
    tf1.disable_v2_behavior()
    print(f"tensorflow {tensorflow_module.__version__} (compat.v1, graph mode); tfc "
          f"{tfc.__version__}; backends {', '.join(backends)}")

    counts: dict[str, int] = {}
    for prog in chosen:
        want = run_program(prog, tf1, is_tfc=False)
        if want.kind:  # (a program bug, or TF 2.x without the TF1 API it needs)
            counts[want.kind] = counts.get(want.kind, 0) + 1
            print(f"{prog.name:28s} {'-':9s} {want.kind}: {want.error.splitlines()[0]}")
            continue
        for be in backends:
            os.environ["TFC_BACKEND"] = be
            t1 = time.perf_counter()
            got = run_program(prog, tfc, is_tfc=True)
            dt = time.perf_counter() - t1
            if got.kind == "tfc error" and prog.expected:
                status, detail = "EXPECTED", f"{prog.expected}; {got.error}"
            elif got.kind:
                status, detail = got.kind, got.error
            else:
                w_labels = [label for label, _ in want.values]
                g_labels = [label for label, _ in got.values]
                problems = [] if w_labels == g_labels else [f"fetches {g_labels} != {w_labels}"]
                if not problems:
                    for (label, w), (_, g) in zip(want.values, got.values):
                        why = compare(w, g, prog.tol)
                        if why:
                            problems.append(f"{label}: {why}")
                if not problems:
                    status, detail = "ok", f"{len(got.values)} fetched values agree"
                elif prog.expected:
                    status, detail = "EXPECTED", f"{prog.expected}; {problems[0]}"
                else:
                    status, detail = "MISMATCH", "; ".join(problems[:3]) + (
                        f" (+{len(problems) - 3} more)" if len(problems) > 3 else "")
            counts[status] = counts.get(status, 0) + 1
            print(f"{prog.name:28s} {be:9s} {status:13s} {dt:5.1f}s  {detail}")
    os.environ.pop("TFC_BACKEND", None)
    summary = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
    print(f"{len(chosen)} programs x {len(backends)} backends: {summary}; "
          f"{time.perf_counter() - t0:.0f} s")
    bad = sum(n for k, n in counts.items() if k != "ok" and k != "EXPECTED")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
