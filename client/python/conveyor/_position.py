"""Where a Loader's next stream starts, and its state_dict.

The position is (epoch, offset): offset counts the samples of the epoch's
global order that every rank consumed through the last batch taken
(Batch.offset, conveyor.retry.resume_point), so it is loadable at any world
size (elastic resume); world_size records the size it was saved at
(informational to the daemon). A loaded state (load) is used by the next
stream of its epoch; progress inside an epoch (advance) by the next stream
that continues the loader's current epoch.

state_dict format: {"pipeline", "epoch", "offset", "world_size", "seed"}.

Thread-safe (one lock); after a fork the child calls after_fork() (the
parent may have held the lock while forking). Pickles without its lock.
"""

import threading
from typing import Any, Dict, Optional, Tuple

from .errors import InvalidRequest


class Position:
    def __init__(self, epoch: int, world_size: int) -> None:
        self._lock = threading.Lock()
        self.epoch = int(epoch)       # epoch of the resume point
        self.offset = 0               # samples of `epoch`'s global order consumed
        self._pending = False         # set by load(): the next stream of `epoch` resumes
        self.world_size = world_size  # world size when the offset was saved

    def after_fork(self) -> None:
        self._lock = threading.Lock()

    def __getstate__(self) -> Dict[str, Any]:
        state = self.__dict__.copy()
        del state["_lock"]
        return state

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def advance(self, epoch: int, offset: int, world_size: int) -> None:
        """A batch was taken: the position is after it."""
        with self._lock:
            self.epoch, self.offset = epoch, offset
            self.world_size = world_size

    def resume_for(self, epoch: int, use_progress: bool) -> Optional[Tuple[int, int, int]]:
        """(epoch, offset, world_size) for a stream starting at `epoch`, or
        None to start at its beginning: a loaded state of that epoch, or
        (use_progress) the progress made in it."""
        with self._lock:
            if (use_progress or self._pending) and epoch == self.epoch and self.offset > 0:
                self._pending = False
                return (self.epoch, self.offset, self.world_size)
            return None

    def set_epoch(self, epoch: int, world_size: int) -> None:
        """The next epoch to read; the position inside the current epoch is
        kept when `epoch` is that epoch, else reading starts at its beginning."""
        with self._lock:
            if epoch != self.epoch:
                self.epoch = epoch
                self.offset = 0
                self._pending = False
                self.world_size = world_size

    def state_dict(self, pipeline: str, seed: int) -> Dict[str, Any]:
        with self._lock:
            return {"pipeline": pipeline, "epoch": self.epoch, "offset": self.offset,
                    "world_size": self.world_size, "seed": seed}

    def load(self, state: Dict[str, Any], pipeline: str, world_size: int) -> Optional[int]:
        """Takes the position of a state_dict saved by a loader of `pipeline`
        (InvalidRequest for another pipeline's); returns its seed, if any."""
        saved = state.get("pipeline")
        if saved is not None and saved != pipeline:
            raise InvalidRequest(
                "load_state_dict: the state was saved by a loader of pipeline %r, this loader reads "
                "%r; a position in one pipeline's epoch means nothing in another's (use a loader "
                "of pipeline %r, or start %r afresh)" % (saved, pipeline, saved, pipeline))
        with self._lock:
            self.epoch = int(state["epoch"])
            self.offset = int(state.get("offset", 0))
            self._pending = self.offset > 0
            self.world_size = int(state.get("world_size", world_size))
        return int(state["seed"]) if "seed" in state else None
