"""One model worker: requests wait in a queue; what arrives together is translated together.

The worker takes the first waiting request, waits a short batching window for others to join,
and runs the translation requests that share their search settings as one call of
`Translator.translate_n_best` (which sorts the lines into batches of similar length). Every model
call runs on the model thread (one thread, shared by the workers of every model a server holds), so no
two batches ever compute at once. With batching off, each
request is run alone, in arrival order. A full queue refuses the request (the app answers 503): the
bound counts the requests that arrived and those the batching window set aside for a later batch
(other settings), which wait at the front, in order. Nothing the worker does can end it: a batch that
fails fails its requests, and anything else that goes wrong fails the requests in hand, is logged, and
the worker goes on. `drain` (SIGTERM) answers every request that has not started with 503 and lets the batch
in flight finish.
"""

from __future__ import annotations

import asyncio
import sys
import time
import traceback
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from .limits import ApiError


@dataclass
class Job:
    """A unit of model work: translation lines with their settings, or any call (explain) run alone."""

    lines: list[str] | None = None
    settings: tuple = ()  # (beam_size, alpha, n_best): jobs with equal settings share a batch
    call: Callable[[], Any] | None = None
    future: asyncio.Future = field(default=None)


class ModelWorker:
    def __init__(
        self,
        translator: Any,
        batching: bool = True,
        window_s: float = 0.005,
        max_queue: int = 256,
        max_batch_lines: int = 256,
        executor: ThreadPoolExecutor | None = None,
        name: str = "model",
        metrics: Any = None,
        turn: asyncio.Lock | None = None,
    ):
        self.translator, self.name, self.metrics = translator, name, metrics
        self.batching, self.window_s = batching, window_s
        self.max_queue, self.max_batch_lines = max_queue, max_batch_lines
        self.counters = {"model_batches": 0, "sentences": 0, "refused_overloaded": 0, "failed": 0}
        self.queue: asyncio.Queue[Job] | None = None  # arrivals, unbounded: `waiting` is checked against max_queue
        self.held: deque[Job] = deque()  # taken out of turn by a batching window: served before the queue
        self.own_executor = executor is None
        self.executor = executor or ThreadPoolExecutor(max_workers=1, thread_name_prefix="aiayn-model")
        self.task: asyncio.Task | None = None
        self.stopping = False
        # Held from the batching window to the batch's end; shared by the workers of one server, so that a
        # worker gathers its batch once the model thread is its own, with all that arrived while another ran.
        self.turn = turn or asyncio.Lock()

    async def start(self) -> None:
        self.queue = asyncio.Queue()
        self.task = asyncio.get_running_loop().create_task(self.run())

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
        if self.own_executor:
            self.executor.shutdown(wait=True)

    def drain(self) -> None:
        """Take no more requests, and answer those waiting with 503 and Retry-After; the batch in flight finishes."""
        self.stopping = True
        waiting = list(self.held)
        self.held.clear()
        while self.queue is not None and not self.queue.empty():
            waiting.append(self.queue.get_nowait())
        for job in waiting:
            if not job.future.done():
                job.future.set_exception(stopping())

    async def translate(self, lines: list[str], beam_size: int | None, alpha: float | None, n_best: int) -> list:
        """The n_best Translations of each line (Translator.translate_n_best), once the worker gets to them."""
        return await self._submit(Job(lines=lines, settings=(beam_size, alpha, n_best)))

    async def run_alone(self, call: Callable[[], Any]) -> Any:
        """call() on the model thread, in turn with the translations."""
        return await self._submit(Job(call=call))

    @property
    def waiting(self) -> int:
        """Requests waiting for the model: arrived, or set aside by a batching window."""
        return (self.queue.qsize() if self.queue is not None else 0) + len(self.held)

    async def _submit(self, job: Job) -> Any:
        job.future = asyncio.get_running_loop().create_future()
        if self.stopping:
            raise stopping()
        if self.waiting >= self.max_queue:
            self.counters["refused_overloaded"] += 1
            raise ApiError(
                503,
                None,
                f"the server is busy: {self.max_queue} requests are waiting; try again shortly",
                {"Retry-After": "1"},
            )
        self.queue.put_nowait(job)
        return await job.future

    async def run(self) -> None:
        while True:
            jobs = [self.held.popleft() if self.held else await self.queue.get()]
            try:
                async with self.turn:
                    if self.batching and jobs[0].call is None:
                        jobs += await self._gather(jobs[0])
                    await self._serve(jobs)
            except Exception as err:  # a fault of the worker's own: fail the requests in hand, keep serving
                traceback.print_exception(err, file=sys.stderr)
                self._fail(jobs, err)

    async def _serve(self, jobs: list[Job]) -> None:
        """Run the jobs on the model thread and answer each; one bad batch fails its requests, never the worker."""
        loop = asyncio.get_running_loop()
        try:
            if jobs[0].call is not None:
                results = [await loop.run_in_executor(self.executor, jobs[0].call)]
            else:
                results = await loop.run_in_executor(self.executor, self._translate, jobs)
        except Exception as err:
            self._fail(jobs, err)
            return
        self.counters["model_batches"] += 1
        for job, result in zip(jobs, results):
            if not job.future.done():  # a client that went away has a cancelled future
                job.future.set_result(result)

    def _fail(self, jobs: list[Job], err: Exception) -> None:
        """Answer each job still waiting with err (counted as failed unless it is the request's own fault)."""
        if not isinstance(err, ApiError):
            self.counters["failed"] += len(jobs)
            if self.metrics is not None:
                self.metrics.failed.labels(self.name).inc(len(jobs))
        for job in jobs:
            if not job.future.done():
                job.future.set_exception(err)

    async def _gather(self, first: Job) -> list[Job]:
        """Jobs with first's settings waiting now or arriving within the batching window, up to max_batch_lines
        lines. The others (other settings, explain calls) stay set aside in `held`, in their order."""
        joined, lines, deadline = [], len(first.lines), time.monotonic() + self.window_s

        def take(job: Job) -> bool:
            nonlocal lines
            if job.call is None and job.settings == first.settings and lines + len(job.lines) <= self.max_batch_lines:
                joined.append(job)
                lines += len(job.lines)
                return True
            return False

        self.held = deque(job for job in self.held if not take(job))
        while lines < self.max_batch_lines:
            if self.queue.empty():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                await asyncio.sleep(min(remaining, 0.001))
                continue
            job = self.queue.get_nowait()
            if not take(job):
                self.held.append(job)
        return joined

    def _translate(self, jobs: list[Job]) -> list[list]:
        """On the model thread: all the jobs' lines in one call, split back per job."""
        beam_size, alpha, n_best = jobs[0].settings
        lines = [line for job in jobs for line in job.lines]
        out = self.translator.translate_n_best(lines, beam_size=beam_size, alpha=alpha, n_best=n_best)
        self.counters["sentences"] += len(lines)
        if self.metrics is not None:
            self.metrics.batch(self.name, len(lines), sum(h[0].tokens for h in out if h))
        results, start = [], 0
        for job in jobs:
            results.append(out[start : start + len(job.lines)])
            start += len(job.lines)
        return results


def stopping() -> ApiError:
    return ApiError(503, None, "the server is stopping; try again shortly", {"Retry-After": "5"})
