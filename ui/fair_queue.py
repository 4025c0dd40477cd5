"""A fair queue in front of Gradio's: what one visitor (a session) may hold, and what nobody reads holds nothing.

Gradio's queue takes any join from anyone up to its max_size: a client that joins 50 times with fresh session hashes
and never opens a stream fills it for everyone (issue 52). This ASGI middleware admits each join by rules a
classroom behind one school address (NAT) passes and a flood does not:

- **one compute job per session runs at a time**: a second waits until the first ends (the page itself never sends
  one: Generate is disabled while a run streams; an API client calling in parallel from one session gets its calls
  in turn), and at most 4 of a session's requests wait at once;
- **a job is confirmed** once its session reads its results (Gradio answering its /queue/data stream, or
  /call/<api>/<id> for the simple API). An unconfirmed job is never started (the queue's dispatcher skips it) and
  is dropped after `SPECVIZ_CONFIRM_S`, its session told why; a page opens its stream a round trip after the join;
- **a session is present** while its page (or gradio_client) holds its heartbeat stream open, as both do from the
  moment they load. A join from a session that is not present is refused once its address has
  `SPECVIZ_UNREAD_PER_CLIENT` such unread jobs waiting (or all addresses four times that): a raw flood of fresh
  session hashes is refused alone, while 50 present sessions behind the same address are never counted, refused or
  evicted for the moment their own join is unread;
- **at most `SPECVIZ_QUEUE_SIZE` compute jobs waiting** (confirmed ones: unread jobs hold no place): past that, a
  join is refused with the line's length and its estimated wait, not Gradio's "Queue is full".

The waiting visitor's place and estimate come from `line_status` (the measured mean time of each compute handler,
Gradio's own record, and the jobs ahead). No torch here; it reads Gradio's queue, whose internals it names in one
place (GradioQueue) so a Gradio upgrade that moves them fails there.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from collections import defaultdict
from urllib.parse import parse_qs

from gradio.server_messages import ProcessCompletedMessage

COMPUTE_ID = "compute"  # the concurrency id every compute handler shares (ui/server.py COMPUTE)
MAX_JOIN_BYTES = (
    8 * 2**20
)  # a join's body: the page's largest (16 prompts of 32,768 characters) fits many times
MAX_SESSION_CHARS = 128  # a longer session id is not tracked (Gradio's are 11-32 characters)
SESSIONS_KEPT = 20_000  # sessions whose last result stream is remembered; the oldest are forgotten first


def setting(env, name: str, default: str, low: float, high: float) -> float:
    """One of this module's settings from the environment, checked at start-up: out of range stops the server with
    its name and range."""
    raw = env.get(name, default)
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not low <= value <= high:
        raise ValueError(f"{name} must be a number from {low:g} to {high:g}, got {raw[:40]!r}")
    return value


class QueueLimits:
    """The fair queue's bounds, each from its environment variable (docs/limits.md)."""

    def __init__(self, env=os.environ):
        self.waiting = int(
            setting(env, "SPECVIZ_QUEUE_SIZE", "96", 1, 10_000)
        )  # confirmed compute jobs waiting
        self.unread = int(setting(env, "SPECVIZ_UNREAD_PER_CLIENT", "32", 1, 1000))  # absent sessions' unread
        self.confirm_s = setting(
            env, "SPECVIZ_CONFIRM_S", "15", 0.5, 600
        )  # an unread job is dropped after this
        self.per_session = 4  # jobs of any kind one session may have waiting (replay steps, a run)


class Refusal(Exception):
    """A join the fair queue refuses: the HTTP status and the visitor's message."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th, 11th, 12th, 13th, 21st."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def wait_text(ahead: int, running: int, slots: int, job_s: float | None) -> str:
    """'3rd in line, about 20 s': the visitor's place behind `ahead` waiting jobs, with `running` of `slots` busy,
    each job taking about job_s seconds (None: nothing measured yet)."""
    place = f"{ordinal(ahead + 1)} in line"
    if job_s is None:
        return place
    # the jobs ahead, and the running ones' remaining half on average, shared over the slots
    wait = job_s * (ahead + 0.5 * running) / max(slots, 1) if ahead or running >= slots else 0.0
    return f"{place}, about {max(wait, 1):.0f} s" if wait else place


class GradioQueue:
    """The parts of Gradio's queue (gradio/queueing.py, 6.x) the fair queue reads and changes: its waiting events
    per concurrency id, its running jobs, each event's session and enqueue time, and the dispatcher's pick. Reads
    take snapshots: they also run on worker threads while the server's loop changes the queue."""

    def __init__(self, blocks):
        self.blocks = blocks

    @property
    def queue(self):
        return self.blocks._queue

    def waiting(self) -> list:
        return [e for q in list(self.queue.event_queue_per_concurrency_id.values()) for e in list(q.queue)]

    def running(self) -> list:
        return [e for job in list(self.queue.active_jobs) if job for e in job]

    def fn(self, fn_index):
        return self.blocks.fns.get(fn_index) if isinstance(fn_index, int) else None

    def compute_slots(self) -> int:
        q = self.queue.event_queue_per_concurrency_id.get(COMPUTE_ID)
        return (q.concurrency_limit if q else None) or 1

    def job_seconds(self) -> float | None:
        """The mean measured time of a compute job (Gradio's record per handler, weighted by its count)."""
        times = [
            (t.avg_time, t.count)
            for fn, t in list(self.queue.process_time_per_fn.items())
            if fn.concurrency_id == COMPUTE_ID and t.count
        ]
        n = sum(c for _, c in times)
        return sum(a * c for a, c in times) / n if n else None

    def knows(self, session: str) -> bool:
        """Gradio holds messages for this session (a stream for it is one Gradio serves)."""
        return session in self.queue.pending_messages_per_session

    def session_of(self, event_id: str) -> str:
        """The session of a job the simple API names by its event id (Gradio's rule: the event's own session,
        else the id itself)."""
        event = self.queue.event_ids_to_events.get(event_id)
        return event.session_hash if event is not None else event_id

    def skip_unconfirmed(self, confirmed) -> None:
        """The dispatcher starts the first *confirmed* event of a concurrency queue with a free slot, and a compute
        job only when its session has none running: unconfirmed ones wait (or are dropped by the sweep), a session's
        second run waits for its first. Gradio's get_events, for handlers that do not batch."""
        queue, original = self.queue, type(self.queue).get_events

        def get_events():
            ids = list(queue.event_queue_per_concurrency_id)
            random.shuffle(ids)  # as Gradio's: no concurrency id starves another
            for cid in ids:
                q = queue.event_queue_per_concurrency_id[cid]
                if q.concurrency_limit is not None and q.current_concurrency >= q.concurrency_limit:
                    continue
                busy = {e.session_hash for e in self.running() if e.concurrency_id == COMPUTE_ID}
                ready = (
                    e for e in q.queue if confirmed(e) and not (cid == COMPUTE_ID and e.session_hash in busy)
                )
                first = next(ready, None)
                if first is None:
                    continue
                if first.fn.batch:
                    return original(queue)
                q.queue.remove(first)
                return [first], False, cid
            return None

        queue.get_events = get_events

    async def drop(self, event, why: str) -> None:
        """Drop one job (out of the line, or stopped where it runs, its generator closed), its session told why
        (a page whose stream opens late shows the message instead of waiting for ever); the session's other jobs
        are untouched."""
        self.queue.send_message(
            event, ProcessCompletedMessage(output={"error": why}, success=False, title="Not run")
        )
        await self.queue.clean_events(event_id=event._id)
        app = self.queue.server_app
        iterator = app.iterators.pop(event._id, None) if app is not None else None
        if iterator is not None:
            try:
                await iterator.aclose()
            except Exception:  # noqa: BLE001  (a generator that fails while closing is gone all the same)
                pass


def line_status(gradio: GradioQueue, ahead: int | None = None, confirmed=lambda event: True) -> str:
    """Where a compute job joining now would stand behind `ahead` jobs (None: the confirmed jobs waiting now),
    with its estimated wait: '3rd in line, about 20 s'; '' when a slot is free and nobody waits."""
    waiting = [e for e in gradio.waiting() if e.concurrency_id == COMPUTE_ID and confirmed(e)]
    running = [e for e in gradio.running() if e.concurrency_id == COMPUTE_ID]
    ahead = len(waiting) if ahead is None else ahead
    slots = gradio.compute_slots()
    if not ahead and len(running) < slots:
        return ""
    return wait_text(ahead, len(running), slots, gradio.job_seconds())


def place_of(blocks) -> str:
    """The line a run joining `blocks`' queue now would stand in (line_status), unread jobs left out when the fair
    queue serves the app; '' before the app serves, or when the queue changed under the read."""
    fair = getattr(blocks, "fair_queue", None)
    if getattr(blocks, "_queue", None) is None:
        return ""
    try:
        return line_status(
            GradioQueue(blocks), confirmed=fair.confirmed if fair is not None else lambda e: True
        )
    except RuntimeError:  # a dict changed size while a worker thread read it
        return ""


def default_identity(scope) -> str:
    """The socket address of the request (ui/uploads.py names the trusted-proxy rule the app passes instead)."""
    return (scope.get("client") or ("?",))[0]


class FairQueue:
    """ASGI middleware: admits joins to Gradio's queue by the module's rules, tracks which sessions are present and
    read their results, and drops what nobody reads. `blocks`: the app (its queue is read when a request comes)."""

    def __init__(self, app, blocks=None, limits: QueueLimits | None = None, identity=default_identity):
        self.app, self.limits, self.identity = app, limits or QueueLimits(), identity
        self.gradio = GradioQueue(blocks) if blocks is not None else None
        if blocks is not None:
            blocks.fair_queue = self  # the page's Generate reads the line through it (place_of)
        self.streams: defaultdict[str, int] = defaultdict(int)  # session -> result streams Gradio serves now
        self.present: defaultdict[str, int] = defaultdict(int)  # session -> heartbeat streams open now
        self.opened: dict[str, float] = {}  # session -> when Gradio last began serving its result stream
        self.sweeper: asyncio.Task | None = None
        self.patched = False

    def is_present(self, session: str) -> bool:
        """A session whose page (or client) holds its heartbeat or a result stream open."""
        return self.present.get(session, 0) > 0 or self.streams.get(session, 0) > 0

    def confirmed(self, event) -> bool:
        """A job is confirmed when its session reads: a result stream served now, or begun since the job joined."""
        s = event.session_hash
        return self.streams.get(s, 0) > 0 or self.opened.get(s, -1.0) >= event.enqueue_time

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or self.gradio is None:
            return await self.app(scope, receive, send)
        self._start()
        path, method = scope["path"].rstrip("/"), scope["method"]
        tail = path.split("/gradio_api/", 1)[1] if "/gradio_api/" in path else ""
        session = self._result_session(tail, method, scope)
        if session is not None:
            return await self._held(self.streams, session, scope, receive, send, result=True)
        if method == "GET" and tail.startswith("heartbeat/"):  # a page (or client) holding its session open
            return await self._held(self.present, tail.split("/", 1)[1], scope, receive, send)
        if method == "POST" and (tail == "queue/join" or tail.startswith("call/")):
            return await self._join(scope, receive, send)
        return await self.app(scope, receive, send)

    def _start(self) -> None:
        if not self.patched and getattr(self.gradio.blocks, "_queue", None) is not None:
            self.gradio.skip_unconfirmed(self.confirmed)
            self.patched = True
        if self.sweeper is None or self.sweeper.done():
            self.sweeper = asyncio.get_running_loop().create_task(self._sweep())

    def _result_session(self, tail: str, method: str, scope) -> str | None:
        """The session whose results this request reads: GET /gradio_api/queue/data?session_hash=S, or GET
        /gradio_api/call/[v2/]<api>/<event id> (the simple API: that event's session); None for any other."""
        if method != "GET":
            return None
        parts = tail.split("/")
        if parts == ["queue", "data"]:
            values = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("session_hash")
            return values[0] if values else None
        if parts[0] == "call" and (len(parts) == 3 or (len(parts) == 4 and parts[1] == "v2")):
            return self.gradio.session_of(parts[-1])
        return None

    async def _held(self, counts: defaultdict, session: str, scope, receive, send, result: bool = False):
        """Serve a long-lived GET, counting it open for `session` in `counts` from the moment Gradio answers it
        with 200 (a path Gradio refuses, or a result stream of a session it does not know, counts for nothing)
        until it ends. A result stream also confirms the session's jobs joined before it."""
        if len(session) > MAX_SESSION_CHARS or (result and not self.gradio.knows(session)):
            return await self.app(scope, receive, send)
        counted = False

        async def watch(message):
            nonlocal counted
            if message["type"] == "http.response.start" and message["status"] == 200 and not counted:
                counted = True
                counts[session] += 1
                if result:
                    self.opened.pop(session, None)
                    self.opened[session] = time.monotonic()  # newest last: the oldest are forgotten first
                    while len(self.opened) > SESSIONS_KEPT:
                        self.opened.pop(next(iter(self.opened)))
            await send(message)

        try:
            return await self.app(scope, receive, watch)
        finally:
            if counted:
                counts[session] -= 1
                if counts[session] <= 0:
                    del counts[session]

    async def _join(self, scope, receive, send):
        body, more = b"", True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > MAX_JOIN_BYTES:
                return await reply(send, 413, f"a request may carry at most {MAX_JOIN_BYTES // 2**20} MiB")
        try:
            self.admit(scope, body)
        except Refusal as r:
            print(f"specviz: refused a queue join: {str(r)[:200]}", flush=True)
            return await reply(send, r.status, str(r))
        sent = False

        async def replay():
            nonlocal sent
            if sent:
                return {"type": "http.disconnect"}
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        return await self.app(scope, replay, send)

    def admit(self, scope, body: bytes) -> None:
        """Refuse (Refusal) a join that breaks a rule of the module docstring; else return."""
        try:
            data = json.loads(body)
        except ValueError:
            return  # Gradio answers a malformed body itself
        if not isinstance(data, dict):
            return
        session, fn = data.get("session_hash"), self.gradio.fn(data.get("fn_index"))
        compute = fn is not None and fn.concurrency_id == COMPUTE_ID
        if scope["path"].rstrip("/").split("/gradio_api/", 1)[-1].startswith("call/"):  # the simple API
            compute = True
        waiting = self.gradio.waiting()
        mine = [e for e in waiting if session and e.session_hash == session]
        if len(mine) >= self.limits.per_session:
            raise Refusal(
                429,
                f"at most {self.limits.per_session} requests per visitor may wait at once: wait for your earlier "
                f"ones to end, or press Stop",
            )
        if not (isinstance(session, str) and self.is_present(session)):
            # unread jobs of sessions no page holds open: a flood is made of these (a page's own join is unread
            # for a round trip: it is never counted or refused here)
            absent = [e for e in waiting if not self.confirmed(e) and not self.is_present(e.session_hash)]
            client = self.identity(scope)
            mine_absent = [e for e in absent if self.identity(e.request.scope) == client]
            if len(mine_absent) >= self.limits.unread or len(absent) >= 4 * self.limits.unread:
                raise Refusal(
                    429,
                    f"at most {self.limits.unread} requests per address may wait with nobody reading their results "
                    f"(SPECVIZ_UNREAD_PER_CLIENT): open the page, or read the results stream of what you sent",
                )
        line = [
            e for e in waiting if e.concurrency_id == COMPUTE_ID and self.confirmed(e)
        ]  # unread: no place
        if compute and len(line) >= self.limits.waiting:
            raise Refusal(
                429,
                f"the server is full: {len(line)} {'run is' if len(line) == 1 else 'runs are'} waiting (SPECVIZ_QUEUE_SIZE); you would be "
                f"{self.line_status(len(line))}. Please try again in a minute.",
            )

    def line_status(self, ahead: int | None = None) -> str:
        """Where a compute job joining now would stand: '3rd in line, about 20 s'."""
        return line_status(self.gradio, ahead, self.confirmed)

    async def _sweep(self) -> None:
        """Every half second: drop the jobs nobody has read for SPECVIZ_CONFIRM_S, waiting or running."""
        while True:
            await asyncio.sleep(0.5)
            try:
                now = time.monotonic()
                stale = [
                    e
                    for e in self.gradio.waiting() + self.gradio.running()
                    if not self.confirmed(e) and now - e.enqueue_time > self.limits.confirm_s
                ]
                for e in stale:
                    print(f"specviz: dropped a job nobody read ({e.fn.api_name or e.fn.name})", flush=True)
                    why = f"nobody read this request's results for {self.limits.confirm_s:g} s (SPECVIZ_CONFIRM_S)"
                    await self.gradio.drop(e, why)
            except Exception as e:  # noqa: BLE001  (the sweep must outlive one bad pass)
                print(f"specviz: the queue sweep failed once: {type(e).__name__}: {e}", flush=True)


async def reply(send, status: int, text: str) -> None:
    """A JSON refusal the page shows as its message (Gradio's client reads `detail`)."""
    await send(
        {"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json")]}
    )
    await send({"type": "http.response.body", "body": json.dumps({"detail": text}).encode("utf-8")})
