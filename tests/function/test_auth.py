"""The sender check on its own: header syntax, the TokenReview's answer, the cache and its bounds; and the settings."""
from __future__ import annotations

import base64
import json
import re
import threading

import pytest

from kai_fn.function.auth import MAX_AGE_SECONDS, Authenticator, Denied, bearer, expiry
from kai_fn.settings import SOURCE_SENDERS, SettingsError, load

AUDIENCE = "kai-fn"
SOURCE = "system:serviceaccount:kai-fn:kai-fn-trainjobs-oidc-sources.knative.dev-apiserversource"
OTHER = "system:serviceaccount:team-a:default"
T0 = 1_800_000_000.0


def jwt(claims: dict | None = None, sub: str = "x") -> str:
    def part(obj):
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()
    return f"{part({'alg': 'RS256'})}.{part({'sub': sub, **(claims or {})})}.c2ln"


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


class Reviews:
    """A fake TokenReview: answers like the API server for the tokens it was told about, and counts."""

    def __init__(self, **users: tuple[str, list[str], dict]) -> None:
        self.tokens = {name: jwt(claims, sub=name) for name, (_, _, claims) in users.items()}
        self.users = {self.tokens[name]: (username, audiences) for name, (username, audiences, _) in users.items()}
        self.calls = 0

    def __call__(self, token: str, audience: str) -> dict:
        self.calls += 1
        known = self.users.get(token)
        if known is None:
            return {"user": {}, "error": "[invalid bearer token, square/go-jose: error in cryptographic primitive]"}
        username, audiences = known
        if audience not in audiences:
            return {"user": {}, "error": "[invalid bearer token, token audiences is invalid for the target audiences]"}
        return {"authenticated": True, "user": {"username": username, "groups": ["system:serviceaccounts"]},
                "audiences": [audience]}


def reviews() -> Reviews:
    return Reviews(source=(SOURCE, [AUDIENCE], {"exp": T0 + 3600}),
                   other=(OTHER, [AUDIENCE], {"exp": T0 + 3600}),
                   elsewhere=(SOURCE, ["https://kubernetes.default.svc"], {"exp": T0 + 3600}),
                   short=(SOURCE, [AUDIENCE], {"exp": T0 + 60}),
                   forever=(SOURCE, [AUDIENCE], {}))


@pytest.mark.parametrize(
    "header,status,reason",
    [
        (None, 401, "no Authorization header"),
        ("", 401, "is not Bearer"),
        ("Bearer", 401, "empty bearer token"),
        ("Bearer  ", 401, "empty bearer token"),
        ("Basic a2FpOmZu", 401, "is not Bearer"),
        ("Bearer not-a-jwt", 401, "not a JWT"),
        ("Bearer a.b.c.d", 401, "not a JWT"),
        ("Bearer a b.c", 401, "not a JWT"),
        ("Token abc.def.ghi", 401, "is not Bearer"),
    ],
    ids=["missing", "empty", "bearer-alone", "bearer-spaces", "basic", "garbage", "four-segments", "inner-space",
         "other-scheme"],
)
def test_a_header_that_carries_no_token_is_refused_before_any_review(header, status, reason):
    fake = reviews()
    with pytest.raises(Denied, match=re.escape(reason)) as denied:
        Authenticator(AUDIENCE, (SOURCE,)).check(header, fake)
    assert (denied.value.status, fake.calls) == (status, 0)
    assert reason in denied.value.reason


@pytest.mark.parametrize(
    "who,senders,status",
    [
        ("source", (SOURCE,), 200),
        ("other", (SOURCE, OTHER), 200),
        ("other", (SOURCE,), 403),
        ("elsewhere", (SOURCE,), 401),
        ("unknown", (SOURCE,), 401),
    ],
    ids=["allowed", "allowed-other", "not-allowed", "wrong-audience", "unknown-jwt"],
)
def test_the_review_decides_401_and_the_senders_403(who, senders, status):
    fake = reviews()
    token = fake.tokens.get(who) or jwt(sub="forged")
    auth = Authenticator(AUDIENCE, senders)
    if status == 200:
        assert auth.check(f"Bearer {token}", fake).username in (SOURCE, OTHER)
    else:
        refused = {401: r"^token \(sha256 \w+\) (rejected by TokenReview|is not for audience)",
                   403: rf"^sender {re.escape(OTHER)} is not in KAI_FN_SENDERS$"}[status]
        with pytest.raises(Denied, match=refused) as denied:
            auth.check(f"Bearer {token}", fake)
        assert denied.value.status == status
        assert token not in denied.value.reason
    assert fake.calls == 1


def test_an_authenticator_without_senders_cannot_be_made_it_would_let_any_service_account_in():
    with pytest.raises(ValueError, match="any ServiceAccount"):
        Authenticator(AUDIENCE, ())


def test_the_scheme_is_case_insensitive_and_surrounding_space_ignored():
    fake = reviews()
    assert Authenticator(AUDIENCE, (SOURCE,)).check(f"  bearer   {fake.tokens['source']} ", fake).username == SOURCE


def test_a_steady_stream_with_one_token_costs_one_review():
    fake, clock = reviews(), Clock()
    auth = Authenticator(AUDIENCE, (SOURCE,), clock=clock)
    for _ in range(50):
        auth.check(f"Bearer {fake.tokens['source']}", fake)
        clock.now += 1
    assert fake.calls == 1


def test_a_refused_token_is_remembered_too():
    fake = reviews()
    auth = Authenticator(AUDIENCE, (SOURCE,), clock=Clock())
    for who in ("elsewhere", "other") * 5:
        with pytest.raises(Denied, match="audiences is invalid" if who == "elsewhere" else "is not in KAI_FN_SENDERS"):
            auth.check(f"Bearer {fake.tokens[who]}", fake)
    assert fake.calls == 2


@pytest.mark.parametrize(
    "who,still_cached_at,reviewed_again_at",
    [("short", 59, 60), ("source", MAX_AGE_SECONDS - 1, MAX_AGE_SECONDS), ("forever", MAX_AGE_SECONDS - 1,
                                                                            MAX_AGE_SECONDS)],
    ids=["until-the-token-expires", "at-most-ten-minutes", "ten-minutes-without-exp"],
)
def test_an_answer_is_kept_until_the_token_expires_at_most_ten_minutes(who, still_cached_at, reviewed_again_at):
    fake, clock = reviews(), Clock()
    auth = Authenticator(AUDIENCE, (SOURCE,), clock=clock)
    header = f"Bearer {fake.tokens[who]}"
    auth.check(header, fake)
    clock.now = T0 + still_cached_at
    auth.check(header, fake)
    assert fake.calls == 1
    clock.now = T0 + reviewed_again_at
    auth.check(header, fake)
    assert fake.calls == 2


def garbage(n: int, prefix: str = "g") -> list[str]:
    return [f"Bearer {jwt(sub=f'{prefix}{i}')}" for i in range(n)]


def refused(auth: Authenticator, header: str, fake: Reviews, client: str = "10.0.0.9") -> int:
    with pytest.raises(Denied, match=r"^(token|too many refused tokens)") as denied:
        auth.check(header, fake, client)
    return denied.value.status


def test_refused_tokens_never_evict_a_senders_answer():
    """Issue 39, attack 3: 1,100 refused tokens used to push the sender's answer out of one shared cache."""
    fake = reviews()
    auth = Authenticator(AUDIENCE, (SOURCE,), clock=Clock(), max_entries=3, failed_burst=10_000)
    source = f"Bearer {fake.tokens['source']}"
    auth.check(source, fake)
    assert [refused(auth, header, fake) for header in garbage(300)] == [401] * 300
    assert fake.calls == 301 and len(auth._good) == 1 and len(auth._bad) == 3
    assert auth.check(source, fake).username == SOURCE
    assert fake.calls == 301


def test_the_senders_answers_are_bounded_least_recently_used_first():
    fake = Reviews(**{f"s{i}": (SOURCE, [AUDIENCE], {"exp": T0 + 3600}) for i in range(4)})
    auth = Authenticator(AUDIENCE, (SOURCE,), clock=Clock(), max_entries=3)
    for i in range(4):
        auth.check(f"Bearer {fake.tokens[f's{i}']}", fake)
    assert len(auth._good) == 3
    auth.check(f"Bearer {fake.tokens['s0']}", fake)  # the least recently used: reviewed again
    assert fake.calls == 5


def test_a_flood_of_distinct_garbage_tokens_costs_one_burst_of_reviews_then_429_and_the_sender_stays_cached():
    """Issue 39, attack 3: 300 distinct JWT-shaped tokens were 300 TokenReviews in 0.7 s."""
    fake, clock = reviews(), Clock()
    auth = Authenticator(AUDIENCE, (SOURCE,), clock=clock, failed_burst=20, failed_rate=1.0)
    source = f"Bearer {fake.tokens['source']}"
    auth.check(source, fake, "10.0.0.1")
    statuses = [refused(auth, header, fake) for header in garbage(300)]
    assert (statuses.count(401), statuses.count(429), fake.calls) == (20, 280, 21)
    assert auth.check(source, fake, "10.0.0.9").username == SOURCE  # from the cache, even from the flooding client
    assert fake.calls == 21
    clock.now += 3  # one refused review a second refills
    assert [refused(auth, header, fake) for header in garbage(5, "later")] == [401, 401, 401, 429, 429]
    assert fake.calls == 24


def test_a_refused_token_seen_again_is_answered_from_its_cache_and_costs_no_more_of_the_limit():
    fake = reviews()
    auth = Authenticator(AUDIENCE, (SOURCE,), clock=Clock(), failed_burst=2)
    header = garbage(1)[0]
    assert [refused(auth, header, fake) for _ in range(10)] == [401] * 10
    assert fake.calls == 1
    assert [refused(auth, h, fake) for h in garbage(2, "new")] == [401, 429]


@pytest.mark.parametrize(
    "second_client,status", [("10.0.0.9", 429), ("10.0.0.2", 401)], ids=["same-client", "another-client"])
def test_the_limit_is_per_client(second_client, status):
    fake = reviews()
    auth = Authenticator(AUDIENCE, (SOURCE,), clock=Clock(), failed_burst=5)
    assert [refused(auth, h, fake) for h in garbage(5)] == [401] * 5
    assert refused(auth, garbage(1, "next")[0], fake, second_client) == status


def test_reviews_that_let_a_sender_in_cost_its_client_nothing():
    fake = Reviews(**{f"s{i}": (SOURCE, [AUDIENCE], {"exp": T0 + 3600}) for i in range(50)})
    auth = Authenticator(AUDIENCE, (SOURCE,), clock=Clock(), failed_burst=2)
    assert {auth.check(f"Bearer {fake.tokens[f's{i}']}", fake, "10.0.0.1").username for i in range(50)} == {SOURCE}
    assert fake.calls == 50


def test_a_review_the_api_cannot_answer_costs_its_client_nothing():
    def down(token, audience):
        raise TimeoutError("the API server did not answer")

    auth = Authenticator(AUDIENCE, (SOURCE,), clock=Clock(), failed_burst=1)
    for header in garbage(3):
        with pytest.raises(TimeoutError, match="did not answer"):
            auth.check(header, down, "10.0.0.1")
    assert refused(auth, garbage(1, "next")[0], reviews(), "10.0.0.1") == 401


def test_concurrent_first_events_with_one_token_share_one_review():
    fake = reviews()
    release = threading.Event()

    def slow(token, audience):
        release.wait(5)
        return fake(token, audience)

    auth = Authenticator(AUDIENCE, (SOURCE,))
    header = f"Bearer {fake.tokens['source']}"
    answers = []
    threads = [threading.Thread(target=lambda: answers.append(auth.check(header, slow).username)) for _ in range(8)]
    for t in threads:
        t.start()
    release.set()
    for t in threads:
        t.join(10)
    assert answers == [SOURCE] * 8 and fake.calls == 1


@pytest.mark.parametrize(
    "token,exp",
    [(jwt({"exp": 1700000000}), 1700000000.0), (jwt({"exp": "soon"}), None), (jwt({"exp": True}), None),
     ("a.!!!.c", None), ("a.bm90IGpzb24.c", None), (jwt(), None)],
    ids=["int", "string", "bool", "bad-base64", "not-json", "absent"],
)
def test_expiry_is_read_without_verifying_and_only_when_well_formed(token, exp):
    assert expiry(token) == exp


def test_bearer_returns_the_token_alone():
    token = jwt()
    assert bearer(f"Bearer {token}") == token


@pytest.mark.parametrize(
    "audience,senders,problem",
    [
        ("kai-fn", f"{SOURCE}, {OTHER}", None),
        ("kai-fn", "", None),
        ("", "", None),
        ("kai-fn", "*", "would accept any ServiceAccount"),
        ("kai-fn", "system:serviceaccount:*:*", "would accept any ServiceAccount"),
        ("kai-fn", "system:serviceaccounts", "would accept any ServiceAccount"),
        ("", SOURCE, "needs KAI_FN_AUDIENCE"),
        ("kai-fn", "system:serviceaccount:kai-fn", "is not system:serviceaccount:<namespace>:<name>"),
        ("kai-fn", "system:serviceaccount:Kai-Fn:x", "is not system:serviceaccount:<namespace>:<name>"),
        ("kai-fn", "system:serviceaccount:kai-fn:a:b", "is not system:serviceaccount:<namespace>:<name>"),
        ("kai-fn", "kai-fn:x", "is not system:serviceaccount:<namespace>:<name>"),
        ("kai-fn", "system:node:worker-1", "is not system:serviceaccount:<namespace>:<name>"),
    ],
    ids=["two-senders", "default-senders", "off", "wildcard", "wildcard-names", "every-service-account-group",
         "senders-without-audience", "no-name", "upper-case-namespace",
         "extra-part", "no-prefix", "a-node"],
)
def test_senders_are_service_accounts_and_need_an_audience(audience, senders, problem):
    if problem is None:
        settings = load(KAI_FN_AUDIENCE=audience, KAI_FN_SENDERS=senders)
        named = tuple(s.strip() for s in senders.split(",") if s.strip())
        assert settings.senders == (named or (SOURCE_SENDERS if audience else ()))
    else:
        with pytest.raises(SettingsError, match=f"invalid setting KAI_FN_SENDERS: .*{re.escape(problem)}"):
            load(KAI_FN_AUDIENCE=audience, KAI_FN_SENDERS=senders)
