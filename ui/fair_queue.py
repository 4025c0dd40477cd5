"""A fair queue in front of Gradio's: the room, not the fastest client, shares the server (issues 52, 65).

Gradio's queue takes any join from anyone up to its max_size, and serves the jobs first come, first served; a
session hash, a heartbeat and an address are all a client's to make up. This ASGI middleware decides who a client
is and what it may hold, by rules a classroom behind one school address (NAT) passes and no single client can use to
refuse the room:

- **a client is a page that was loaded**: the page (GET /, or its /config: gradio_client's first request) comes
  with a signed token in a cookie (COOKIE) the browser or gradio_client sends with every request after; new tokens are limited per address (`SPECVIZ_NEW_CLIENTS` a minute, a
  classroom arriving within a minute stays under; past it the page is served without one). A request without a
  valid token is its address's *anonymous* client: every such session behind one address is one client. Session
  hashes, heartbeats and headers name nothing;
- **what a client holds is bounded**: at most `SPECVIZ_CLIENT_JOBS` jobs waiting for a page client (its sessions
  together), `SPECVIZ_ADDRESS_JOBS` for an address's anonymous client, 4 for one session; **one compute job
  per client runs at a time**, and heavy jobs (LIGHT_COST) hold at most all compute slots but one;
- **the line is served by deficit round robin between clients** (Shreedhar & Varghese 1995), each job charged its
  cost in units of one 64-token run (job_cost: a B = 16 batch raced against AR is 32 of them): a client with many
  or heavy jobs gets its turn, not the line;
- **a job is confirmed** once its session reads its results (Gradio answering its /queue/data stream, or
  /call/<api>/<id> for the simple API). An unconfirmed job is never started and is dropped after
  `SPECVIZ_CONFIRM_S`, its session told why;
- **at most `SPECVIZ_QUEUE_SIZE` compute jobs hold a place** (every joined one, read or not): a join past that
  pushes out the newest job of the client holding the most places when that client holds more than the joining
  one would; else it is refused with the line's length and its estimated wait, not Gradio's "Queue is full";
- **sessions** (Gradio's per-visitor state) belong to the client that first used them: a client keeps at most
  `SPECVIZ_CLIENT_SESSIONS` (an anonymous one four times that), its own oldest going first, and when the server
  holds `SPECVIZ_MAX_SESSIONS` the oldest session of the client holding the most goes: another client's requests
  never evict a visitor's history.

The waiting visitor's place and estimate come from `line_status` (the measured mean time of each compute handler,
Gradio's own record, and the jobs ahead). No torch here; it reads Gradio's queue and state holder, whose internals it
names in one place (GradioQueue) so a Gradio upgrade that moves them fails there.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import inspect
import json
import math
import os
import random
import secrets
import time
from collections import Counter, OrderedDict, defaultdict
from urllib.parse import parse_qs

from gradio.server_messages import ProcessCompletedMessage

COMPUTE_ID = "compute"  # the concurrency id every compute handler shares (ui/server.py COMPUTE)
MAX_JOIN_BYTES = (
    8 * 2**20
)  # a join's body: the page's largest (16 prompts of 32,768 characters) fits many times
MAX_SESSION_CHARS = 128  # a longer session id is not tracked (Gradio's are 11-32 characters)
SESSIONS_KEPT = (
    20_000  # sessions whose owner and last result stream are remembered; the oldest are forgotten first
)
ADDRESSES_KEPT = 4096  # addresses whose token budget is remembered; the oldest are forgotten first
# the routes besides a queue join that create a Gradio session for the hash their body names: a queue=False
# handler's call, a component's server function
SESSION_ROUTES = ("run/predict", "component_server")
COOKIE = "specviz_client"  # the page's token: <16 hex nonce>.<16 hex tag>
# where a token is issued: the page, and its config (what gradio_client reads first; it keeps the cookies it sets)
PAGE_PATHS = ("", "/config")
TOKEN_AGE_S = 12 * 3600  # a token's cookie lasts this long in the browser
MAX_COST = 64.0  # a job's cost in 64-token runs is capped here (a turn never waits for more than 64 rounds)
MIN_COST = 0.25  # and floored here (a 16-token run is not free)
# a job costing more is heavy: heavy jobs hold at most all compute slots but one, so a light one (up to a 256-token
# run, a 128-token race) never waits behind heavy jobs alone, however many clients send them
LIGHT_COST = 4.0
# jobs whose cost is not read from their inputs alone: Measure on this host races B = 1, 2, 4, 8, 16 (31 rows),
# the drift meter runs 2 x 100 seeded 2-token runs on the prompt (ui/batch_tab.py, ui/tab_runs.py)
ROWS_OF = {"batch_host": 31.0, "measure_drift": 8.0}


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
        # compute jobs holding a place in line, read or not
        self.waiting = int(setting(env, "SPECVIZ_QUEUE_SIZE", "96", 1, 10_000))
        self.client_jobs = int(
            setting(env, "SPECVIZ_CLIENT_JOBS", "4", 1, 100)
        )  # a page client's waiting jobs
        # an address's anonymous client (no page token): its waiting jobs, all its sessions together
        self.address_jobs = int(setting(env, "SPECVIZ_ADDRESS_JOBS", "32", 1, 1000))
        self.confirm_s = setting(
            env, "SPECVIZ_CONFIRM_S", "15", 0.5, 600
        )  # an unread job is dropped after this
        self.new_clients = setting(
            env, "SPECVIZ_NEW_CLIENTS", "100", 1, 100_000
        )  # page tokens per address a minute
        self.client_sessions = int(
            setting(env, "SPECVIZ_CLIENT_SESSIONS", "8", 1, 10_000)
        )  # sessions a page keeps
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

    def schedule(self, pick) -> None:
        """The dispatcher starts, for a concurrency queue with a free slot, the event `pick(cid, events)` names
        (None: none of them may start now). Gradio's get_events, for handlers that do not batch."""
        queue, original = self.queue, type(self.queue).get_events

        def get_events():
            ids = list(queue.event_queue_per_concurrency_id)
            random.shuffle(ids)  # as Gradio's: no concurrency id starves another
            for cid in ids:
                q = queue.event_queue_per_concurrency_id[cid]
                if q.concurrency_limit is not None and q.current_concurrency >= q.concurrency_limit:
                    continue
                first = pick(cid, list(q.queue))
                if first is None:
                    continue
                if first.fn.batch:
                    return original(queue)
                q.queue.remove(first)
                return [first], False, cid
            return None

        queue.get_events = get_events

    def sessions(self):
        """Gradio's state holder: every session's state, oldest used first (gradio/state_holder.py)."""
        return self.blocks.state_holder

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


def job_cost(fn, data) -> float:
    """A job's cost in 64-token runs (MIN_COST..MAX_COST), read from its inputs by their components' elem_id (the
    page's) or label (the API's parameter names): max new tokens ÷ 64, ×2 when it races a baseline, × its rows
    (the batch's prompt lines), × its beams; Measure on this host and the drift meter by ROWS_OF. A 64-token run
    is 1, a B = 16 batch of 64 tokens raced against AR is 32, a 512-token B = 8 beam search the cap."""
    try:  # the API's inputs are named by the handler's parameters (gr.api labels them "1st", "2nd", …)
        names = list(inspect.signature(fn.fn).parameters)
    except (AttributeError, TypeError, ValueError):
        names = []
    values = {}
    inputs = getattr(fn, "inputs", None) or []
    for i, (comp, value) in enumerate(zip(inputs, data if isinstance(data, list) else [])):
        key = getattr(comp, "elem_id", None) or (names[i] if i < len(names) else getattr(comp, "label", None))
        if key:
            values[key] = value

    def num(*keys: str, default: float) -> float:
        for key in keys:
            v = values.get(key)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0:
                return float(v)
        return default

    name = getattr(fn, "api_name", None)
    per_token = num("max-new", "max_new_tokens", default=64.0) / 64
    lanes = 2.0 if any(values.get(k) is True for k in ("race-on", "beam-race", "batch-race")) else 1.0
    prompts = values.get("batch-prompts")
    rows = sum(1 for line in prompts.splitlines() if line.strip()) if isinstance(prompts, str) else 1
    if name == "batch_host":  # every B raced against AR
        cost = ROWS_OF[name] * 2 * per_token
    elif name in ROWS_OF:
        cost = ROWS_OF[name]
    else:
        cost = per_token * lanes * max(rows, 1) * num("num-beams", "num_beams", default=1.0)
    return min(max(cost, MIN_COST), MAX_COST)


class Tokens:
    """The pages' tokens: `<nonce>.<tag>`, the tag an HMAC of the nonce under this process's key (nothing is
    stored per token; a restart issues new ones). At most `per_minute` new ones per address a minute (a bucket that
    refills at that rate and holds a minute's worth)."""

    def __init__(self, per_minute: float, key: bytes | None = None):
        self.key, self.per_minute = key or secrets.token_bytes(16), per_minute
        self.budget: OrderedDict[str, tuple[float, float]] = OrderedDict()  # address -> (tokens left, when)

    def issue(self, address: str, now: float | None = None) -> str | None:
        """A new token for a page served to `address`, or None when the address spent its minute's worth."""
        now = time.monotonic() if now is None else now
        left, then = self.budget.pop(address, (self.per_minute, now))
        left = min(self.per_minute, left + (now - then) * self.per_minute / 60)
        self.budget[address] = (left - 1 if left >= 1 else left, now)
        while len(self.budget) > ADDRESSES_KEPT:
            self.budget.popitem(last=False)
        if left < 1:
            return None
        nonce = secrets.token_hex(8)
        return f"{nonce}.{self._tag(nonce)}"

    def check(self, token: str | None) -> str | None:
        """The nonce of a token this process issued; None for anything else."""
        nonce, _, tag = (token or "").partition(".")
        if len(nonce) != 16 or len(tag) != 16:
            return None
        return nonce if hmac.compare_digest(tag, self._tag(nonce)) else None

    def _tag(self, nonce: str) -> str:
        return hmac.new(self.key, nonce.encode("ascii", "replace"), hashlib.sha256).hexdigest()[:16]


def cookie(scope, name: str) -> str | None:
    """The value of the request's cookie `name`, or None."""
    for key, value in scope.get("headers", []):
        if key.lower() != b"cookie":
            continue
        for part in value.decode("latin-1").split(";"):
            k, _, v = part.strip().partition("=")
            if k == name:
                return v.strip().strip('"')
    return None


class Rounds:
    """Deficit round robin between clients (Shreedhar & Varghese 1995): the clients with a job waiting form a ring;
    at each turn a client gains one quantum (a 64-token run) and starts its first job once its gains cover the
    job's cost; a client with nothing waiting leaves the ring and its gains with it. So each client with work waiting
    gets the same share of runs started, weighted by their cost, however many jobs or sessions it holds."""

    def __init__(self, quantum: float = 1.0):
        self.quantum, self.ring, self.deficit, self.after = quantum, [], {}, None

    def pick(self, heads: dict, waiting: set, cost) -> object | None:
        """Of `heads` (client -> the first job it may start now), the one to start; `waiting`: every client with
        a job in line (one running its job keeps its place in the ring, gaining nothing); cost(job) in quanta."""
        self.ring = [c for c in self.ring if c in waiting]
        self.deficit = {c: d for c, d in self.deficit.items() if c in waiting}
        for c in heads:
            if c not in self.deficit:
                self.ring.append(c)
                self.deficit[c] = 0.0
        if not heads:
            return None
        costs = {c: min(max(cost(job), MIN_COST), MAX_COST) for c, job in heads.items()}
        at = self.ring.index(self.after) + 1 if self.after in self.ring else 0
        while True:  # ends: every lap adds a quantum to each client in `heads`, and costs are capped
            c = self.ring[at % len(self.ring)]
            at += 1
            if c not in heads:
                continue
            self.deficit[c] += self.quantum
            if self.deficit[c] >= costs[c]:
                self.deficit[c] -= costs[c]
                self.after = c
                return heads[c]


class FairQueue:
    """ASGI middleware: issues the pages' tokens, admits joins to Gradio's queue by the module's rules, orders the
    line by client, bounds the sessions each client keeps, and drops what nobody reads. `blocks`: the app (its queue
    is read when a request comes); identity(scope): the address a request comes from (ui/server.py client_of)."""

    def __init__(self, app, blocks=None, limits: QueueLimits | None = None, identity=default_identity):
        self.app, self.limits, self.identity = app, limits or QueueLimits(), identity
        self.gradio = GradioQueue(blocks) if blocks is not None else None
        if blocks is not None:
            blocks.fair_queue = self  # the page's Generate reads the line through it (place_of)
        self.tokens = Tokens(self.limits.new_clients)
        self.rounds = Rounds()
        self.streams: defaultdict[str, int] = defaultdict(int)  # session -> result streams Gradio serves now
        self.opened: dict[str, float] = {}  # session -> when Gradio last began serving its result stream
        self.owners: OrderedDict[str, str] = OrderedDict()  # session -> the client that first used it
        self.sweeper: asyncio.Task | None = None
        self.patched = False

    def client(self, scope) -> str:
        """Who sent a request: "page:<nonce>" for a valid page token, else "address:<its address>"."""
        nonce = self.tokens.check(cookie(scope, COOKIE))
        return f"page:{nonce}" if nonce else f"address:{self.identity(scope)}"

    def client_of(self, event) -> str:
        """The client of a job: who sent its join (read once, kept on the event)."""
        client = getattr(event, "specviz_client", None)
        if client is None:
            client = event.specviz_client = self.client(event.request.scope)
        return client

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
        if method == "GET" and path in PAGE_PATHS:
            return await self._page(scope, receive, send)
        if tail.startswith("call/v2/"):  # Gradio's keyword-argument route: a positional `data` was a 500
            return await reply(
                send, 404, 'not served here: call /gradio_api/call/<api_name> with {"data": [...]}'
            )
        session = self._result_session(tail, method, scope)
        if session is not None:
            self.claim(session, scope)
            return await self._held(session, scope, receive, send)
        if method == "GET" and tail.startswith("heartbeat/"):  # a hint: it claims the session, proves nothing
            self.claim(tail.split("/", 1)[1], scope)
        if method == "POST" and (tail in ("queue/join", *SESSION_ROUTES) or tail.startswith("call/")):
            return await self._join(scope, receive, send, queued=tail not in SESSION_ROUTES)
        return await self.app(scope, receive, send)

    def _start(self) -> None:
        if not self.patched and getattr(self.gradio.blocks, "_queue", None) is not None:
            self.gradio.schedule(self.pick)
            self.bound_sessions()
            self.patched = True
        if self.sweeper is None or self.sweeper.done():
            self.sweeper = asyncio.get_running_loop().create_task(self._sweep())

    async def _page(self, scope, receive, send):
        """The page, with a new token in its cookie when the request carries no valid one and its address has
        tokens left this minute (else it is served without: its sessions are its address's)."""
        token = None if self.tokens.check(cookie(scope, COOKIE)) else self.tokens.issue(self.identity(scope))
        if token is None:
            return await self.app(scope, receive, send)
        forwarded = dict(scope.get("headers", [])).get(b"x-forwarded-proto", b"").decode("latin-1")
        secure = scope.get("scheme") == "https" or forwarded.strip() == "https"
        # in an https iframe (a Hugging Face Space) the cookie must be SameSite=None (partitioned where the
        # browser partitions third-party cookies); over plain http Lax
        attrs = "; Secure; SameSite=None; Partitioned" if secure else "; SameSite=Lax"
        header = f"{COOKIE}={token}; Path=/; Max-Age={TOKEN_AGE_S}; HttpOnly{attrs}".encode("latin-1")

        async def with_cookie(message):
            if message["type"] == "http.response.start" and message["status"] == 200:
                message = {**message, "headers": [*message.get("headers", []), (b"set-cookie", header)]}
            await send(message)

        return await self.app(scope, receive, with_cookie)

    def claim(self, session, scope) -> None:
        """A session belongs to the client that first used it (its sessions are the ones it may lose first)."""
        if not isinstance(session, str) or not session or len(session) > MAX_SESSION_CHARS:
            return
        if session in self.owners:
            self.owners.move_to_end(session)
            return
        self.owners[session] = self.client(scope)
        while len(self.owners) > SESSIONS_KEPT:
            self.owners.popitem(last=False)

    def bound_sessions(self) -> None:
        """Gradio's state holder evicts by `evictions` instead of its own least-recently-used rule."""
        holder = self.gradio.sessions()

        def update(session_id: str) -> None:
            with holder.lock:
                data = holder.session_data
                if session_id in data:
                    data.move_to_end(session_id)
                for gone in self.evictions(list(data), session_id, holder.capacity):
                    data.pop(gone, None)
                    holder.time_last_used.pop(gone, None)

        holder.update = update

    def evictions(self, sessions: list, current: str, capacity: int) -> list:
        """The sessions to forget (`sessions` oldest used first; `current` is never one): the oldest of the
        current session's client beyond its SPECVIZ_CLIENT_SESSIONS (an address's anonymous client four times
        that), then, while more than `capacity` are kept, the oldest of whichever client holds the most."""
        owner = self.owners.get(current, "?")
        quota = self.limits.client_sessions * (1 if owner.startswith("page:") else 4)
        mine = [s for s in sessions if self.owners.get(s, "?") == owner and s != current]
        gone = mine[: max(0, len(mine) + 1 - quota)]
        left = len(sessions) - len(gone)
        if left <= capacity:
            return gone
        by: dict[str, list] = defaultdict(list)
        for s in sessions:
            if s != current and s not in gone:
                by[self.owners.get(s, "?")].append(s)
        rank = {s: i for i, s in enumerate(sessions)}
        while left > capacity and by:
            top = max(by, key=lambda o: (len(by[o]), -rank[by[o][0]]))  # most held; a tie: the oldest used
            gone.append(by[top].pop(0))
            if not by[top]:
                del by[top]
            left -= 1
        return gone

    def pick(self, cid: str, events: list):
        """The job the dispatcher starts now from a concurrency queue (None: none): for compute, the round robin's
        pick among clients running none, of each its first confirmed job whose session runs none, a heavy one
        (costing over LIGHT_COST) only while heavy jobs hold fewer than all slots but one; for the rest, the first
        confirmed job."""
        if cid != COMPUTE_ID:
            return next((e for e in events if self.confirmed(e)), None)
        running = [e for e in self.gradio.running() if e.concurrency_id == COMPUTE_ID]
        busy_sessions = {e.session_hash for e in running}
        busy = {self.client_of(e) for e in running}
        heavy_room = sum(self.cost(e) > LIGHT_COST for e in running) < max(1, self.gradio.compute_slots() - 1)
        heads, waiting = {}, set()
        for e in events:
            if not self.confirmed(e):
                continue
            c = self.client_of(e)
            waiting.add(c)
            if c in heads or c in busy or e.session_hash in busy_sessions:
                continue
            if heavy_room or self.cost(e) <= LIGHT_COST:
                heads[c] = e
        return self.rounds.pick(heads, waiting, self.cost)

    def cost(self, event) -> float:
        """A job's cost (job_cost of its inputs, read once, kept on the event)."""
        cost = getattr(event, "specviz_cost", None)
        if cost is None:
            cost = event.specviz_cost = job_cost(event.fn, getattr(event.data, "data", None))
        return cost

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

    async def _held(self, session: str, scope, receive, send):
        """Serve a result stream, counting it open for `session` from the moment Gradio answers it with 200 (a
        path Gradio refuses, or a stream of a session it does not know, counts for nothing) until it ends; it
        confirms the session's jobs joined before it."""
        if len(session) > MAX_SESSION_CHARS or not self.gradio.knows(session):
            return await ended_cleanly(self.app, scope, receive, send)
        counted = False

        async def watch(message):
            nonlocal counted
            if message["type"] == "http.response.start" and message["status"] == 200 and not counted:
                counted = True
                self.streams[session] += 1
                self.opened.pop(session, None)
                self.opened[session] = time.monotonic()  # newest last: the oldest are forgotten first
                while len(self.opened) > SESSIONS_KEPT:
                    self.opened.pop(next(iter(self.opened)))
            await send(message)

        try:
            return await ended_cleanly(self.app, scope, receive, watch)
        finally:
            if counted:
                self.streams[session] -= 1
                if self.streams[session] <= 0:
                    del self.streams[session]

    async def _join(self, scope, receive, send, queued: bool = True):
        """A queue join (or a direct call of a queue=False handler, `queued` False: only its session is claimed):
        admitted by `admit`, or refused in words."""
        body, more = b"", True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > MAX_JOIN_BYTES:
                return await reply(send, 413, f"a request may carry at most {MAX_JOIN_BYTES // 2**20} MiB")
        try:
            data = json.loads(body)
        except ValueError:
            data = None  # Gradio answers a malformed body itself
        if isinstance(data, dict):
            self.claim(data.get("session_hash"), scope)
            try:
                pushed = self.admit(scope, data) if queued else None
            except Refusal as r:
                print(f"specviz: refused a queue join: {str(r)[:200]}", flush=True)
                return await reply(send, r.status, str(r))
            if pushed is not None:
                print(
                    "specviz: the line is full: pushed out the newest job of the client holding most",
                    flush=True,
                )
                why = (
                    f"the line is full ({self.limits.waiting} runs, SPECVIZ_QUEUE_SIZE) and your page held the "
                    "most places in it: this request gave its place to another visitor's"
                )
                await self.gradio.drop(pushed, why)
        sent = False

        async def replay():
            nonlocal sent
            if sent:
                return {"type": "http.disconnect"}
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        return await self.app(scope, replay, send)

    def admit(self, scope, data: dict):
        """Refuse (Refusal) a join that breaks a rule of the module docstring; else return None, or the job it
        pushes out of a full line."""
        session, fn = data.get("session_hash"), self.gradio.fn(data.get("fn_index"))
        compute = fn is not None and fn.concurrency_id == COMPUTE_ID
        if scope["path"].rstrip("/").split("/gradio_api/", 1)[-1].startswith("call/"):  # the simple API
            compute = True
        waiting = self.gradio.waiting()
        if len([e for e in waiting if session and e.session_hash == session]) >= self.limits.per_session:
            raise Refusal(
                429,
                f"at most {self.limits.per_session} requests per visitor may wait at once: wait for your earlier "
                f"ones to end, or press Stop",
            )
        client = self.client(scope)
        held = Counter(self.client_of(e) for e in waiting)
        if client.startswith("page:"):
            bound, name, who = self.limits.client_jobs, "SPECVIZ_CLIENT_JOBS", "page"
        else:
            bound, name, who = (
                self.limits.address_jobs,
                "SPECVIZ_ADDRESS_JOBS",
                "address without a loaded page",
            )
        if held[client] >= bound:
            raise Refusal(
                429,
                f"at most {bound} requests per {who} may wait at once ({name}): wait for your earlier ones to end, "
                f"or load the page and press Stop",
            )
        line = [e for e in waiting if e.concurrency_id == COMPUTE_ID]  # every joined job holds a place
        if not compute or len(line) < self.limits.waiting:
            return None
        in_line = Counter(self.client_of(e) for e in line)
        top, most = max(in_line.items(), key=lambda kv: kv[1])
        if most > in_line[client] + 1:  # the heaviest holder gives its newest place
            return max((e for e in line if self.client_of(e) == top), key=lambda e: e.enqueue_time)
        raise Refusal(
            429,
            f"the server is full: {len(line)} {'run is' if len(line) == 1 else 'runs are'} waiting "
            f"(SPECVIZ_QUEUE_SIZE); you would be {self.line_status(len(line))}. Please try again in a minute.",
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


async def ended_cleanly(app, scope, receive, send) -> None:
    """Serve a stream through `app`; when it fails after its response started (Gradio's /queue/data raises its 404
    inside the stream once the session's messages are gone: another stream of the session closed, or none was
    ever there), end the response instead, with one log line, not an "Exception in ASGI application" traceback."""
    started = finished = False

    async def watch(message):
        nonlocal started, finished
        started = started or message["type"] == "http.response.start"
        finished = finished or (
            message["type"] == "http.response.body" and not message.get("more_body", False)
        )
        await send(message)

    try:
        await app(scope, receive, watch)
    except Exception as e:  # noqa: BLE001  (only after the response started; before, it goes on up)
        if not started:
            raise
        print(f"specviz: a result stream ended: {type(e).__name__}: {str(e)[:80]}", flush=True)
        if not finished:
            try:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            except Exception:  # noqa: BLE001  (the client is gone)
                pass


async def reply(send, status: int, text: str) -> None:
    """A JSON refusal the page shows as its message (Gradio's client reads `detail`)."""
    await send(
        {"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json")]}
    )
    await send({"type": "http.response.body", "body": json.dumps({"detail": text}).encode("utf-8")})
