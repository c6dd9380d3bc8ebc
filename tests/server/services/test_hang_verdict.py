"""The hang verdict on synthetic faulthandler dumps: the rank not where the others are is named, and where."""

from __future__ import annotations

from server.services.hang_verdict import MAX_FRAMES, Place, last_dump, main_thread, place_of, verdict

TORCH = "/venv/lib/python3.12/site-packages/torch/distributed/distributed_c10d.py"
THREADING = "/usr/lib/python3.12/threading.py"


def dump(main: list[tuple[str, int, str]], ident: str = "0x00007f00000000aa") -> str:
    """A dump as faulthandler writes it with all_threads: a helper thread, then the main one."""
    helper = (
        "Thread 0x00007f00000000bb (most recent call first):\n"
        f'  File "{THREADING}", line 331 in wait\n'
        f'  File "{THREADING}", line 1002 in _bootstrap\n\n'
    )
    frames = "".join(f'  File "{file}", line {line} in {function}\n' for file, line, function in main)
    return helper + f"Current thread {ident} (most recent call first):\n" + frames


WAITING = [(TORCH, 2501, "all_reduce"), ("/home/u/train.py", 215, "main"), ("/home/u/train.py", 240, "<module>")]
SLEEPING = [("/home/u/train.py", 212, "main"), ("/home/u/train.py", 240, "<module>")]


def place(text: str) -> Place | None:
    thread = main_thread(last_dump(text)[1])
    return None if thread is None else place_of(thread)


def test_the_rank_outside_the_collective_is_named_with_its_line():
    places = {0: place(dump(WAITING)), 1: place(dump(SLEEPING)), 2: place(dump(WAITING)), 3: place(dump(WAITING))}
    text = verdict(places)
    assert text.startswith("rank 1: not where the others are, at train.py:212 in main; "), text
    assert "ranks 0, 2, 3 in all_reduce (torch/distributed/distributed_c10d.py:2501), from train.py:215" in text


def test_with_two_ranks_the_one_waiting_in_the_collective_is_not_the_culprit():
    text = verdict({0: place(dump(WAITING)), 1: place(dump(SLEEPING))})
    assert text.startswith("rank 1: not where the others are"), text
    assert "rank 0 in all_reduce" in text


def test_all_in_the_same_collective_says_so():
    text = verdict({0: place(dump(WAITING)), 1: place(dump(WAITING))})
    assert text.startswith("every rank that answered (0, 1) is in all_reduce"), text
    assert "a peer outside the job, or a deadlock" in text


def test_a_rank_without_stacks_is_said():
    text = verdict({0: place(dump(WAITING)), 1: None})
    assert "rank 1 wrote no stacks" in text
    assert verdict({0: None}).startswith("rank 0 wrote no stacks") or "no rank" in verdict({})


def test_the_last_of_appended_dumps_is_read():
    first = dump(SLEEPING)
    second = dump(WAITING)
    start, threads = last_dump(first + second)
    assert start == len(first) and len(threads) == 2
    main = main_thread(threads)
    assert main is not None and main.frames[0].function == "all_reduce"


def test_a_strangers_dump_is_bounded():
    """Garbage between frames is skipped, and a thread's frames stop at MAX_FRAMES."""
    deep = [("/home/u/r.py", n, "recurse") for n in range(MAX_FRAMES + 50)]
    text = "garbage\x00\n" + dump(deep).replace("line 1 in", "line ??? in")
    thread = main_thread(last_dump(text)[1])
    assert thread is not None and len(thread.frames) == MAX_FRAMES
    assert len(verdict({rank: place(text) for rank in range(1000)})) <= 2000
