import threading

import pytest
import trio

from claw import InlineWorkerPool, ThreadWorkerPool


async def test_thread_pool_runs_off_the_event_loop_thread() -> None:
    pool = ThreadWorkerPool(max_workers=2)
    main = threading.get_ident()
    ident = await pool.run_sync(threading.get_ident)
    assert ident != main
    assert pool.statistics().total_tokens == 2


async def test_inline_pool_runs_on_the_calling_thread_and_checkpoints() -> None:
    pool = InlineWorkerPool()
    assert await pool.run_sync(threading.get_ident) == threading.get_ident()
    with trio.CancelScope() as scope:
        scope.cancel()
        with pytest.raises(trio.Cancelled):
            await pool.run_sync(lambda: None)
    assert pool.statistics().inline


def test_thread_pool_rejects_zero_workers() -> None:
    with pytest.raises(ValueError, match="max_workers"):
        ThreadWorkerPool(max_workers=0)
