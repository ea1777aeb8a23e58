"""One process of the torchrun job that tests/train/test_parallel.py starts:

    torchrun --nproc-per-node 2 tests/train/dist_worker.py OUT full | stop | resume

trains the helpers' task (SGD, batches of 10, 5 epochs: 20 steps) and saves this process's
weights and train losses in OUT/rank<r>.npz; its checkpoints go to OUT/run<r> (only process 0
may write there). stop: the dashboard of process 0 asks to stop after step 7 (as the TUI's q);
resume: continue from process 0's newest checkpoint."""

import os
import sys

import numpy as np
from helpers import StopAt, loaders, model, weights

from ember import optim, train


def main(out, mode):
    rank = int(os.environ["RANK"])
    m = model(seed=3, dropout=0.0)
    learner = train.Learner(m, optim.SGD(lr=0.1, momentum=0.9),
                            dashboard=StopAt(7) if mode == "stop" else None,
                            checkpoint_dir=os.path.join(out, f"run{rank}"))
    assert learner.rank == rank
    if mode == "resume":
        learner.resume(os.path.join(out, "run0", "checkpoints"))
    train_loader, _ = loaders(batch_size=10)
    learner.fit(train_loader, epochs=5)
    losses = learner.history.epoch_values("Loss", "train")
    np.savez(os.path.join(out, f"rank{rank}.npz"), step=learner.step,
             losses=[losses[e] for e in sorted(losses)], **weights(learner.model))


if __name__ == "__main__":
    main(*sys.argv[1:])
