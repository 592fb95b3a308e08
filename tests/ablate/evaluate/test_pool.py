"""The bookkeeping of outputs' memory on a GPU: which of the output pool's segments each shape's
judge has been sent, and which buffers the kernel keeps (no GPU needed: stand-in segments, CPU
tensors; the memory itself is tested by pytest -m gpu)."""
from ablate.evaluate._pool import OutputPool


class Segment:
    def __init__(self, size):
        self.size, self.taken = size, 0

    def take_fd(self):
        self.taken += 1
        return 100 + self.taken


def pool_with(*sizes):
    pool = OutputPool.__new__(OutputPool)  # no MemPool: only the bookkeeping is under test
    pool.segments = {sid: Segment(size) for sid, size in enumerate(sizes, 1)}
    pool.unsent = sorted(pool.segments)
    return pool


def test_a_segment_goes_to_a_shape_once():
    pool = pool_with(10, 20)
    assert [(sid, size) for sid, size, _ in pool.new_fds()] == [(1, 10), (2, 20)]
    assert pool.new_fds() == []


def test_a_segment_that_outlives_its_shape_goes_to_the_next_shape_too():
    """The next shape's judge has maps of its own: a segment kept across shapes (a cached buffer)
    where the next outputs land must be sent again, or its outputs are in an unknown segment."""
    pool = pool_with(10, 20)
    pool.new_fds()
    del pool.segments[1]  # freed at the shape's end
    pool.send_again()
    assert [(sid, size) for sid, size, _ in pool.new_fds()] == [(2, 20)]


def test_an_output_the_kernel_keeps_is_told_from_one_it_let_go():
    """On a GPU an output is read where it lies unless a later call may overwrite it first: one
    whose storage outlives the driver's hold on its batch is the kernel's own buffer (then copied
    out as part of each call). The bookkeeping, on CPU tensors."""
    import torch
    from torch.multiprocessing.reductions import StorageWeakRef

    from ablate.evaluate._candidate import Driver

    driver = Driver.__new__(Driver)  # no device: only the bookkeeping is under test
    driver.weak, driver.returned, driver.kept, driver.held = StorageWeakRef, [], [], []
    buffer = torch.empty(64)  # a kernel's module-level output buffer
    for out in (buffer, torch.empty(32), buffer[:16]):  # kept, fresh, a view of the kept one
        driver.remember(out)
        driver.held.append(out)
    del out
    driver.forget_batch()
    start = buffer.untyped_storage().data_ptr()
    assert driver.kept == [(start, start + 64 * 4)] * 2 and driver.held == []
    del buffer
    driver.forget_batch()
    assert driver.kept == []
