"""The output pool's bookkeeping of which segments the judge has mapped (no GPU needed: the
segments are stand-ins; the memory itself is tested by pytest -m gpu)."""
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
