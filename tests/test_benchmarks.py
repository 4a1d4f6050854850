"""The benchmarks' own machinery, where a mistake would skew every figure they print."""
import threading
import time

from benchmarks.contention import take_turns


def test_peers_taking_turns_never_step_at_once_and_each_gets_its_turns():
    # A step that runs longer than the one before may overrun its turn, into the gap that starts the next: the
    # gap, not the turn's end, keeps the peers apart. A busy machine stretches the 3 ms steps, not past 0.1 s.
    turn, gap, turns = 0.4, 0.1, 6
    spans, timed = {0: [], 1: []}, {}

    def peer(index):
        def step():
            start = time.time()
            time.sleep(0.003)
            spans[index].append((start, time.time()))
        timed[index] = take_turns(step, begin_at, begin_at + turns * turn, index, 2, turn, gap)

    begin_at = time.time() + 0.1
    threads = [threading.Thread(target=peer, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for index in (0, 1):
        slots = [int((start - begin_at) // turn) for start, _ in spans[index]]
        assert sorted(set(slots)) == list(range(index, turns, 2))  # every turn of its own, and only those
        for start, end in spans[index]:
            k = int((start - begin_at) // turn)
            assert start >= begin_at + k * turn + gap and end <= begin_at + (k + 1) * turn + gap
        assert len(timed[index]) == len(spans[index]) - turns // 2  # each turn's first step untimed
        assert all(0.003 <= t < gap for t in timed[index])
    for start, end in spans[0]:
        assert all(end <= s or e <= start for s, e in spans[1])
