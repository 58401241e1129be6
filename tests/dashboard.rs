//! The web dashboard (docs/dashboard.md) in a real headless Chromium against a real node on
//! loopback: sign in and see the example fleet, a run appearing live, pause and resume, a
//! transcript, a wrong token refused, and a fleet of 1,000 agents with one row updated live.
//! Screenshots go to target/dashboard-screenshots/ (and docs/dashboard/ with
//! VIGIL_UPDATE_SCREENSHOTS=1). Without Chromium the tests skip, or fail when `CI` is set
//! (support/browser.rs).

#[path = "support/browser.rs"]
mod browser;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use browser::{browser_or_skip, when_missing, Browser, Missing, POLL_MS};
use fantoccini::key::Key;
use fantoccini::{Client, Locator};
use serde_json::{json, Value};
use vigil::api::client::ApiClient;
use vigil::io::clock::SystemClock;
use vigil::io::entropy::SeededEntropy;
use vigil::io::storage::StorageLocation;
use vigil::node::{Node, NodeConfig, TenantToken};

const OPERATOR: &str = "dashboard-operator-token";
/// Longest a test waits for something to show in the page; a bound on waiting, never a goal.
const WAIT_MS_MAX: u64 = 30_000;
/// The window of the fleet and agent views (the issue's laptop size).
const WINDOW: (u32, u32) = (1280, 800);
/// The big fleet.
const FLEET_LARGE: usize = 1_000;
/// Agents created at once for the big fleet.
const CREATE_CONCURRENCY: usize = 8;
const FLEET_FILE: &str = include_str!("../examples/fleet.toml");

/// One browser at a time: the machine's cores are few, and three Chromiums at once make waits
/// long for no gain.
static ONE_BROWSER: Mutex<()> = Mutex::new(());

/// A ready node on an in-memory database with tenant `default` and `fleet` applied.
async fn start(fleet: Option<&str>) -> Node {
    let config = NodeConfig {
        listen_addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        storage: StorageLocation::in_memory(),
        clock: SystemClock::shared(),
        entropy: SeededEntropy::shared(15),
        tenants: vec![TenantToken {
            tenant: "default".into(),
            token: OPERATOR.into(),
        }],
        on_commit: None,
        on_replayed: None,
        adapters: vigil::exec::adapter::BuiltinAdapters::shared(),
        // The stub model provider listens on loopback: allow it, as `[outbound] allow` does.
        run_services: vigil::exec::host::RunServices::guarded(
            &vigil::net::TlsOptions::default(),
            Default::default(),
            vigil::net::OutboundPolicy {
                allow: vec!["127.0.0.1/32".parse().unwrap()],
            },
        )
        .unwrap(),
        transcripts: Arc::new(vigil::transcript::MemoryTranscripts::new()),
        alert_sinks: Vec::new(),
        snapshots: Default::default(),
        heartbeat_test_seam: false,
    };
    let mut node = Node::start(config).await.expect("node starts");
    node.ready().await.expect("node recovers");
    if let Some(text) = fleet {
        let fleet = vigil::fleet::Fleet::parse("examples/fleet.toml", text).expect("fleet parses");
        fleet.apply(node.shell()).await.expect("fleet applies");
    }
    node
}

/// Runs `script` (a function body; `arguments` are `args`) until it returns something other than
/// null or false, and returns that; fails the test naming `what` after `WAIT_MS_MAX`.
async fn wait_for(client: &Client, what: &str, script: &str, args: Vec<Value>) -> Value {
    let deadline = Instant::now() + Duration::from_millis(WAIT_MS_MAX);
    let mut last = Value::Null;
    loop {
        match client.execute(script, args.clone()).await {
            Ok(Value::Null) | Ok(Value::Bool(false)) => {}
            Ok(value) => return value,
            Err(error) => last = Value::String(error.to_string()),
        }
        if Instant::now() > deadline {
            let page = client
                .execute("return document.body.innerText.slice(0, 2000)", vec![])
                .await
                .unwrap_or_default();
            panic!("waited {WAIT_MS_MAX} ms for {what} (last error: {last}); page: {page}");
        }
        tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
    }
}

/// The text of the first element matching `css`, or null.
const TEXT_OF: &str =
    "const e = document.querySelector(arguments[0]); return e ? e.textContent : null;";

/// Waits until the text of `css` contains `part`; returns the text.
async fn wait_text(client: &Client, css: &str, part: &str) -> String {
    let script = format!(
        "const e = document.querySelector(arguments[0]); \
         return e && e.textContent.includes(arguments[1]) ? e.textContent : null;"
    );
    let what = format!("{css} to contain {part:?}");
    let found = wait_for(client, &what, &script, vec![json!(css), json!(part)]).await;
    found.as_str().unwrap_or_default().to_string()
}

async fn text(client: &Client, css: &str) -> String {
    let value = client.execute(TEXT_OF, vec![json!(css)]).await.unwrap();
    value.as_str().unwrap_or_default().to_string()
}

async fn type_into(client: &Client, css: &str, text: &str) {
    let field = client.find(Locator::Css(css)).await.unwrap();
    field.clear().await.unwrap();
    field.send_keys(text).await.unwrap();
}

/// Clicks the element `css` finds; found again when the page replaced it meanwhile (live
/// updates rebuild the agent view's tables).
async fn click(client: &Client, css: &str) {
    let deadline = Instant::now() + Duration::from_millis(WAIT_MS_MAX);
    loop {
        let clicked = match client.find(Locator::Css(css)).await {
            Ok(element) => element.click().await,
            Err(error) => Err(error),
        };
        match clicked {
            Ok(()) => return,
            Err(error) if Instant::now() > deadline => panic!("could not click {css}: {error}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(POLL_MS)).await,
        }
    }
}

/// Opens the page and signs in with `token` through the form.
async fn sign_in(client: &Client, node: &Node, token: &str) {
    client
        .goto(&format!("http://{}/", node.local_addr()))
        .await
        .unwrap();
    wait_for(
        client,
        "the sign-in form",
        "return !document.getElementById('sign-in').hidden",
        vec![],
    )
    .await;
    type_into(client, "#token", token).await;
    click(client, "#sign-in-form button[type=submit]").await;
}

/// Saves a screenshot as `name`.png in target/dashboard-screenshots/, and in docs/dashboard/
/// when VIGIL_UPDATE_SCREENSHOTS=1.
async fn screenshot(client: &Client, name: &str) {
    let png = client.screenshot().await.unwrap();
    assert!(png.starts_with(b"\x89PNG"), "a PNG");
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut dirs = vec![root.join("target/dashboard-screenshots")];
    if std::env::var("VIGIL_UPDATE_SCREENSHOTS").as_deref() == Ok("1") {
        dirs.push(root.join("docs/dashboard"));
    }
    for dir in dirs {
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("{name}.png")), &png).unwrap();
    }
}

/// The id of the agent named `name`.
/// Pauses `agent` until resumed, then resumes it, through the API; answers when each happened,
/// as the agent's timeline reads them from the log.
async fn pause_and_resume(api: &ApiClient, agent: u64) -> (u64, u64) {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let paused = api
        .post_json(&format!("/v1/agents/{agent}/pause"), &json!({}))
        .await
        .unwrap();
    assert_eq!(paused.status.as_u16(), 200);
    let resumed = api
        .post_json(&format!("/v1/agents/{agent}/resume"), &json!(null))
        .await
        .unwrap();
    assert_eq!(resumed.status.as_u16(), 200);
    let deadline = Instant::now() + Duration::from_millis(WAIT_MS_MAX);
    loop {
        let timeline = api
            .get(&format!("/v1/agents/{agent}/timeline?since_ms={since}"))
            .await
            .unwrap()
            .json()
            .unwrap();
        let at = |kind: &str| {
            timeline["entries"]
                .as_array()
                .unwrap()
                .iter()
                .find(|e| e["type"] == kind)
                .map(|e| e["at_ms"].as_u64().unwrap())
        };
        if let (Some(from), Some(to)) = (at("agent_paused"), at("agent_resumed")) {
            return (from, to);
        }
        assert!(
            Instant::now() < deadline,
            "the pause never reached the log: {timeline}"
        );
        tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
    }
}

async fn agent_id(api: &ApiClient, name: &str) -> u64 {
    let answer = api.get(&format!("/v1/agents?name={name}")).await.unwrap();
    answer.json().unwrap()["agents"][0]["id"]
        .as_u64()
        .expect("the agent exists")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_fleet_live_runs_pause_resume_and_a_transcript() {
    let Some(tools) = browser_or_skip() else {
        return;
    };
    let _one = ONE_BROWSER.lock().unwrap_or_else(|e| e.into_inner());
    let node = start(Some(FLEET_FILE)).await;
    let api = ApiClient::with_token(node.local_addr(), OPERATOR);
    let browser = Browser::start(&tools, WINDOW.0, WINDOW.1).await;
    let client = &browser.client;
    // Before the page is opened: on-call paused and resumed, which only the log remembers.
    let on_call = agent_id(&api, "on-call").await;
    let earlier = pause_and_resume(&api, on_call).await;
    sign_in(client, &node, OPERATOR).await;

    // Every agent of the example fleet has its row, and the counts agree.
    let names = [
        "triage",
        "flaky-digest",
        "on-call",
        "stuck-crawler",
        "concierge",
    ];
    let rows = wait_for(
        client,
        "the fleet's five rows",
        "const rows = [...document.querySelectorAll('#fleet-rows tr')]; \
         return rows.length === 5 ? rows.map(r => r.querySelector('[data-col=name]').textContent) : null;",
        vec![],
    )
    .await;
    for name in names {
        assert!(
            rows.as_array().unwrap().contains(&json!(name)),
            "{name} in {rows}"
        );
    }
    assert_eq!(text(client, "[data-count=agents]").await, "5");
    assert_eq!(
        text(client, "#token").await,
        "",
        "the token is not left in the form"
    );
    let stored = client
        .execute(
            "return sessionStorage.getItem('vigil.operator_token')",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(stored, json!(OPERATOR));
    // A timer agent's run shows up in the counts without a reload.
    wait_for(
        client,
        "a run today in the counts",
        "return Number(document.querySelector('[data-count=runs_today]').textContent) > 0",
        vec![],
    )
    .await;
    screenshot(client, "fleet").await;

    // The agent view of on-call, opened from its row.
    click(client, &format!("tr[data-agent='{on_call}'] a")).await;
    wait_text(client, "#agent-title", "on-call").await;
    // The pause made before the page was opened is a band of the timeline, from the pause to
    // the resume as the log has them.
    let band = wait_for(
        client,
        "the earlier pause in the timeline",
        "const b = document.querySelector(`#timeline rect.pause[data-from='${arguments[0]}']`); \
         return b ? Number(b.dataset.to) : null;",
        vec![json!(earlier.0)],
    )
    .await;
    assert_eq!(band, json!(earlier.1), "the band ends at the resume");
    client
        .execute("window.notReloaded = true; return true", vec![])
        .await
        .unwrap();

    // A wakeup asked elsewhere (the API, not this page) appears live, and its run ends.
    let woken = api
        .post_json(
            &format!("/v1/agents/{on_call}/wakeup"),
            &json!({"source": "on_demand", "reason": "look at ticket 7"}),
        )
        .await
        .unwrap()
        .json()
        .unwrap();
    let run = woken["run"].as_u64().expect("a queued run");
    wait_for(
        client,
        "the woken run to appear and succeed",
        "const r = document.querySelector(`#runs tr[data-run='${arguments[0]}']`); \
         return r && r.dataset.status === 'succeeded';",
        vec![json!(run)],
    )
    .await;
    wait_text(client, "#wakeups", "look at ticket 7").await;
    let kept = client
        .execute("return window.notReloaded === true", vec![])
        .await
        .unwrap();
    assert_eq!(kept, json!(true), "the page was not reloaded");

    // Wake through the page: the API's answer is shown, then the run.
    type_into(client, "#wake-reason", "from the dashboard").await;
    type_into(client, "#wake-payload", r#"{"ticket": 8}"#).await;
    click(client, "#wake").await;
    let said = wait_text(client, "#action-result", "Wake: queued (run ").await;
    let second: u64 = said
        .split("(run ")
        .nth(1)
        .and_then(|rest| rest.trim_end_matches(')').parse().ok())
        .unwrap_or_else(|| panic!("a run id in {said:?}"));
    assert!(second > run);
    let wakeup = wait_for(
        client,
        "the page's wakeup in the history",
        "const rows = [...document.querySelectorAll('#wakeups tr')]; \
         const r = rows.find(r => r.textContent.includes('from the dashboard')); \
         return r ? r.textContent : null;",
        vec![],
    )
    .await;
    assert!(wakeup.as_str().unwrap().contains("operator"), "{wakeup}");

    // A timed pause, then resume; each shown as the node says it.
    type_into(client, "#pause-minutes", "30").await;
    click(client, "#pause").await;
    wait_text(client, "[data-fact=pause]", "left").await;
    let fetched = api
        .get(&format!("/v1/agents/{on_call}"))
        .await
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(fetched["paused_by"], "operator", "{fetched}");
    wait_text(
        client,
        &format!("tr[data-agent='{on_call}'] [data-col=pause]"),
        "operator",
    )
    .await;
    click(client, "#resume").await;
    wait_for(
        client,
        "the pause to end",
        "return document.querySelector('[data-fact=pause]').textContent === '—'",
        vec![],
    )
    .await;
    // Paused until resumed: the status says so.
    type_into(client, "#pause-minutes", "").await;
    click(client, "#pause").await;
    wait_text(client, "[data-fact=status]", "paused").await;
    click(client, "#resume").await;
    wait_text(client, "[data-fact=status]", "active").await;
    // A value the API refuses: its own words reach the page.
    type_into(client, "#pause-minutes", "0").await;
    click(client, "#pause").await;
    wait_text(
        client,
        "#action-result",
        "400 invalid_field: minutes must be between 1 and 10080",
    )
    .await;
    type_into(client, "#pause-minutes", "").await;

    // The transcript of the first run, from its link.
    click(client, &format!("#runs tr[data-run='{run}'] a")).await;
    wait_text(client, "#transcript-title", &format!("run {run}")).await;
    let kinds = wait_for(
        client,
        "transcript entries",
        "const k = [...document.querySelectorAll('#log li[data-kind]')].map(l => l.dataset.kind); \
         return k.length ? k : null;",
        vec![],
    )
    .await;
    // A scripted run's transcript is its stop entry: why and how it ended.
    assert!(
        kinds.as_array().unwrap().contains(&json!("stop")),
        "{kinds}"
    );
    wait_text(client, "#log", "end_turn: scripted step 0: Succeeded").await;
    // The timeline holds the agent's finished runs.
    wait_for(
        client,
        "runs in the timeline",
        "return document.querySelectorAll('#timeline rect.run').length >= 2",
        vec![],
    )
    .await;
    client
        .execute("window.scrollTo(0, 0); return true", vec![])
        .await
        .unwrap();
    screenshot(client, "agent").await;

    // A phone's width: the fleet view still reads (its table scrolls sideways).
    client.set_window_size(390, 844).await.unwrap();
    client
        .goto(&format!("http://{}/#/", node.local_addr()))
        .await
        .unwrap();
    wait_text(client, "[data-count=agents]", "5").await;
    screenshot(client, "fleet-phone").await;
    client.set_window_size(WINDOW.0, WINDOW.1).await.unwrap();

    // Cancel a run from its row: an agent whose run never ends by itself.
    let spec = json!({"name": "hanger", "heartbeat": {"sources": ["on_demand"]},
        "adapter": {"type": "scripted", "steps": [{"duration_ms": 0, "outcome": "hang"}]}});
    let created = api.post_json("/v1/agents", &spec).await.unwrap();
    let hanger = created.json().unwrap()["agent"]["id"].as_u64().unwrap();
    wait_text(client, "[data-count=agents]", "6").await;
    click(client, &format!("tr[data-agent='{hanger}'] a")).await;
    wait_text(client, "#agent-title", "hanger").await;
    type_into(client, "#wake-reason", "never ends").await;
    click(client, "#wake").await;
    let said = wait_text(client, "#action-result", "Wake: queued (run ").await;
    let stuck: u64 = said
        .split("(run ")
        .nth(1)
        .and_then(|rest| rest.trim_end_matches(')').parse().ok())
        .unwrap_or_else(|| panic!("a run id in {said:?}"));
    click(client, &format!("button[data-cancel='{stuck}']")).await;
    wait_text(
        client,
        "#action-result",
        &format!("Cancel run {stuck}: run {stuck} cancelled"),
    )
    .await;
    wait_for(
        client,
        "the cancelled run's row",
        "const r = document.querySelector(`#runs tr[data-run='${arguments[0]}']`); \
         return r && r.dataset.status === 'cancelled';",
        vec![json!(stuck)],
    )
    .await;
    // Cancelling it again: the API's refusal, in its words.
    let again = api
        .post_json(&format!("/v1/runs/{stuck}/cancel"), &json!(null))
        .await
        .unwrap();
    assert_eq!(again.status.as_u16(), 409);
    // Resetting a task session it never had: the API says there was none.
    type_into(client, "#session-key", "ticket-9").await;
    click(client, "#session-reset").await;
    wait_text(
        client,
        "#action-result",
        "Reset session: task ticket-9 had no session",
    )
    .await;

    browser.close().await;
    node.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_token_is_refused_in_the_apis_words() {
    let Some(tools) = browser_or_skip() else {
        return;
    };
    let _one = ONE_BROWSER.lock().unwrap_or_else(|e| e.into_inner());
    let node = start(Some(FLEET_FILE)).await;
    let browser = Browser::start(&tools, WINDOW.0, WINDOW.1).await;
    let client = &browser.client;
    sign_in(client, &node, "not-the-operator-token").await;
    // The page shows what the API itself answers to that token.
    let refused = ApiClient::with_token(node.local_addr(), "not-the-operator-token")
        .get("/v1/agents")
        .await
        .unwrap();
    assert_eq!(refused.status.as_u16(), 401);
    let message = refused.json().unwrap()["error"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    let said = wait_text(client, "#sign-in-error", "401 unauthenticated").await;
    assert_eq!(said, format!("401 unauthenticated: {message}"));
    let state = client
        .execute(
            "return [sessionStorage.getItem('vigil.operator_token'), \
             document.getElementById('fleet').hidden, \
             document.querySelectorAll('#fleet-rows tr').length]",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(state, json!([null, true, 0]));
    // The right token then works in the same tab.
    type_into(client, "#token", OPERATOR).await;
    click(client, "#sign-in-form button[type=submit]").await;
    wait_text(client, "[data-count=agents]", "5").await;
    browser.close().await;
    node.stop();
}

/// The layout shifts `window.shifts` collected, read after two animation frames and a
/// moment (shift entries are delivered after the frame that caused them is rendered).
async fn settled_shifts(client: &fantoccini::Client) -> serde_json::Value {
    client
        .execute_async(
            "const done = arguments[arguments.length - 1]; \
             requestAnimationFrame(() => requestAnimationFrame(() => \
               setTimeout(() => done(window.shifts.slice()), 100)));",
            vec![],
        )
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_agents_render_and_one_row_updates_live() {
    let Some(tools) = browser_or_skip() else {
        return;
    };
    let _one = ONE_BROWSER.lock().unwrap_or_else(|e| e.into_inner());
    let node = start(None).await;
    let addr = node.local_addr();
    let mut creators = Vec::new();
    for worker in 0..CREATE_CONCURRENCY {
        creators.push(tokio::spawn(async move {
            let api = ApiClient::with_token(addr, OPERATOR);
            for i in (worker..FLEET_LARGE).step_by(CREATE_CONCURRENCY) {
                let spec = json!({"name": format!("agent-{i:04}"), "heartbeat": {"sources": ["on_demand"]}});
                let answer = api.post_json("/v1/agents", &spec).await.unwrap();
                assert_eq!(answer.status.as_u16(), 201, "{:?}", answer.json());
            }
        }));
    }
    for creator in creators {
        creator.await.unwrap();
    }
    let api = ApiClient::with_token(addr, OPERATOR);
    let browser = Browser::start(&tools, WINDOW.0, WINDOW.1).await;
    let client = &browser.client;
    sign_in(client, &node, OPERATOR).await;
    wait_for(
        client,
        "1,000 rows",
        "return document.querySelectorAll('#fleet-rows tr').length === arguments[0]",
        vec![json!(FLEET_LARGE)],
    )
    .await;
    assert_eq!(text(client, "[data-count=agents]").await, "1000");

    // One agent paused elsewhere: its row (and the count) change, without a reload.
    let target = agent_id(&api, "agent-0777").await;
    client
        .execute("window.notReloaded = true; return true", vec![])
        .await
        .unwrap();
    // No layout shift on a live update: the row in view, the browser's own Layout Instability
    // API counts every shift of visible content from here on (none follows an input).
    client
        .execute(
            "document.querySelector(`tr[data-agent='${arguments[0]}']`) \
               .scrollIntoView({block: 'center'}); \
             window.shifts = []; \
             new PerformanceObserver(list => { \
               for (const e of list.getEntries()) if (!e.hadRecentInput) window.shifts.push(e.value); \
             }).observe({type: 'layout-shift'}); \
             return true",
            vec![json!(target)],
        )
        .await
        .unwrap();
    let paused = api
        .post_json(&format!("/v1/agents/{target}/pause"), &json!({}))
        .await
        .unwrap();
    assert_eq!(paused.status.as_u16(), 200);
    wait_text(
        client,
        &format!("tr[data-agent='{target}'] [data-col=status]"),
        "paused",
    )
    .await;
    wait_text(client, "[data-count=paused]", "1").await;
    let others = client
        .execute(
            "return [...document.querySelectorAll('#fleet-rows [data-col=status]')] \
             .filter(c => c.textContent === 'paused').length",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(others, json!(1), "only the paused agent's row says paused");
    let shifts = settled_shifts(client).await;
    assert_eq!(
        shifts,
        json!([]),
        "the live update moved what was on screen"
    );
    // The measure sees a shift when there is one: content pushed in above the table.
    client
        .execute(
            "const pad = document.createElement('div'); pad.style.height = '120px'; \
             document.querySelector('#fleet-rows').closest('table').before(pad); return true",
            vec![],
        )
        .await
        .unwrap();
    let shifts = settled_shifts(client).await;
    assert_ne!(shifts, json!([]), "a shift the observer did not see");
    let kept = client
        .execute("return window.notReloaded === true", vec![])
        .await
        .unwrap();
    assert_eq!(kept, json!(true), "the page was not reloaded");

    // Sorting by keyboard: Enter on the name column's header button, twice.
    let header = client
        .find(Locator::Css("th[data-col=name] button"))
        .await
        .unwrap();
    for (order, first) in [("ascending", "agent-0000"), ("descending", "agent-0999")] {
        header.send_keys(&Key::Enter.to_string()).await.unwrap();
        wait_for(
            client,
            &format!("the rows sorted by name, {order}"),
            "const th = document.querySelector('th[data-col=name]'); \
             const top = document.querySelector('#fleet-rows tr [data-col=name]'); \
             return th.getAttribute('aria-sort') === arguments[0] && top.textContent === arguments[1];",
            vec![json!(order), json!(first)],
        )
        .await;
    }

    // Filtering by name leaves one row.
    type_into(client, "#filter-name", "agent-0777").await;
    wait_text(client, "#shown", "1 of 1000 shown").await;

    // The first-paint figure for docs/dashboard.md: measured, printed, never asserted.
    client.refresh().await.unwrap();
    let figures = wait_for(
        client,
        "the fleet rendered after a reload",
        "const m = performance.getEntriesByName('vigil:fleet-rendered')[0]; \
         const r = performance.getEntriesByName('vigil:fleet-read')[0]; \
         const p = performance.getEntriesByName('first-contentful-paint')[0]; \
         return m && document.querySelectorAll('#fleet-rows tr').length === arguments[0] \
           ? {first_contentful_paint_ms: p ? p.startTime : null, fleet_read_ms: r.startTime, \
              rendered_ms: m.startTime} : null;",
        vec![json!(FLEET_LARGE)],
    )
    .await;
    eprintln!("dashboard with {FLEET_LARGE} agents, after a reload: {figures}");
    browser.close().await;
    node.stop();
}

/// A `vigil serve` child, SIGKILLed when dropped (a failed test leaves no node behind).
struct Serve(Child);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `vigil serve` (the real binary) on `listen`, with the example fleet and the test's token;
/// returns it and the address it listens on (its first stdout line).
fn spawn_serve(data_dir: &Path, listen: &str) -> (Serve, SocketAddr) {
    let fleet = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/fleet.toml");
    let mut child = Command::new(env!("CARGO_BIN_EXE_vigil"))
        .args(["serve", "--listen", listen, "--data-dir"])
        .arg(data_dir)
        .arg("--fleet")
        .arg(fleet)
        .env("VIGIL_LOG", "warn")
        .env("VIGIL_OPERATOR_TOKEN", OPERATOR)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("vigil serve starts");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|addr| addr.parse().ok())
        .unwrap_or_else(|| panic!("an address in {line:?}"));
    (Serve(child), addr)
}

/// Waits until the node at `addr` has applied the example fleet (its five agents).
async fn wait_ready(api: &ApiClient) {
    let deadline = Instant::now() + Duration::from_millis(WAIT_MS_MAX);
    loop {
        if let Ok(answer) = api.get("/v1/agents").await {
            let count = answer
                .json()
                .ok()
                .and_then(|v| v["agents"].as_array().map(Vec::len));
            if count == Some(5) {
                return;
            }
        }
        assert!(
            Instant::now() < deadline,
            "the node was not ready in {WAIT_MS_MAX} ms"
        );
        tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_live_view_resumes_after_the_node_is_killed_and_restarted() {
    let Some(tools) = browser_or_skip() else {
        return;
    };
    let _one = ONE_BROWSER.lock().unwrap_or_else(|e| e.into_inner());
    let data_dir = std::env::temp_dir().join(format!("vigil-dashboard-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data_dir);
    let (first, addr) = spawn_serve(&data_dir, "127.0.0.1:0");
    let api = ApiClient::with_token(addr, OPERATOR);
    wait_ready(&api).await;
    let browser = Browser::start(&tools, WINDOW.0, WINDOW.1).await;
    let client = &browser.client;
    client.goto(&format!("http://{addr}/")).await.unwrap();
    type_into(client, "#token", OPERATOR).await;
    click(client, "#sign-in-form button[type=submit]").await;
    wait_text(client, "#stream", "live").await;
    wait_text(client, "[data-count=agents]", "5").await;
    client
        .execute("window.notReloaded = true; return true", vec![])
        .await
        .unwrap();

    // SIGKILL: the stream drops and the page says so.
    drop(first);
    wait_text(client, "#stream", "resuming").await;

    // The node comes back on the same address; the page resumes, and an agent paused after
    // the restart shows in its row.
    let (second, again) = spawn_serve(&data_dir, &addr.to_string());
    assert_eq!(again, addr);
    wait_ready(&api).await;
    let on_call = agent_id(&api, "on-call").await;
    let paused = api
        .post_json(&format!("/v1/agents/{on_call}/pause"), &json!({}))
        .await
        .unwrap();
    assert_eq!(paused.status.as_u16(), 200);
    wait_text(
        client,
        &format!("tr[data-agent='{on_call}'] [data-col=status]"),
        "paused",
    )
    .await;
    wait_text(client, "#stream", "live").await;
    let kept = client
        .execute("return window.notReloaded === true", vec![])
        .await
        .unwrap();
    assert_eq!(kept, json!(true), "the page was not reloaded");

    browser.close().await;
    drop(second);
    let _ = std::fs::remove_dir_all(&data_dir);
}

/// A model provider on loopback (plain HTTP, OpenAI's wire shape) that answers every call
/// `[IDLE]`: the agent had nothing to do.
async fn idle_provider() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let service = hyper::service::service_fn(|_request| async {
                    let body = json!({
                        "id": "chatcmpl-idle", "object": "chat.completion", "model": "stub",
                        "choices": [{"index": 0, "finish_reason": "stop",
                            "message": {"role": "assistant", "content": "[IDLE]"}}],
                        "usage": {"prompt_tokens": 12, "completion_tokens": 2},
                    });
                    let answer = hyper::Response::builder()
                        .header("content-type", "application/json")
                        .body(http_body_util::Full::new(bytes::Bytes::from(
                            body.to_string(),
                        )))
                        .unwrap();
                    Ok::<_, std::convert::Infallible>(answer)
                });
                let io = hyper_util::rt::TokioIo::new(stream);
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(io, service)
                    .await;
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_answering_idle_on_its_timer_shows_idling_never_active() {
    let Some(tools) = browser_or_skip() else {
        return;
    };
    let _one = ONE_BROWSER.lock().unwrap_or_else(|e| e.into_inner());
    let provider = idle_provider().await;
    let node = start(None).await;
    let api = ApiClient::with_token(node.local_addr(), OPERATOR);
    let adapter = json!({"type": "llm", "base_url": format!("http://{provider}"), "model": "stub"});
    // `idler`'s timer wakes it every second and it answers [IDLE]: ghost runs. `asked` answers
    // the same to a wakeup someone asked for, which is a real turn, not a ghost.
    let mut ids = Vec::new();
    for (name, heartbeat) in [
        ("idler", json!({"interval_ms": 1_000})),
        ("asked", json!({"sources": ["on_demand"]})),
    ] {
        let spec = json!({"name": name, "adapter": adapter, "heartbeat": heartbeat});
        let created = api.post_json("/v1/agents", &spec).await.unwrap();
        assert_eq!(created.status.as_u16(), 201, "{:?}", created.json());
        ids.push(created.json().unwrap()["agent"]["id"].as_u64().unwrap());
    }
    let (idler, asked) = (ids[0], ids[1]);
    let browser = Browser::start(&tools, WINDOW.0, WINDOW.1).await;
    let client = &browser.client;
    sign_in(client, &node, OPERATOR).await;
    wait_text(client, "[data-count=agents]", "2").await;
    let woken = api
        .post_json(
            &format!("/v1/agents/{asked}/wakeup"),
            &json!({"source": "on_demand", "reason": "anything new?"}),
        )
        .await
        .unwrap();
    assert_eq!(woken.json().unwrap()["outcome"], "queued");

    // The ghosts arrive live; the idler's status says idling, the other stays active.
    wait_for(
        client,
        "two ghost runs of the idler, all of its runs",
        "const t = document.querySelector(`tr[data-agent='${arguments[0]}'] [data-col=ghosts]`).textContent; \
         const m = t.match(/^(\\d+)\\/(\\d+) \\(100%\\)$/); return m && Number(m[1]) >= 2;",
        vec![json!(idler)],
    )
    .await;
    wait_text(
        client,
        &format!("tr[data-agent='{idler}'] [data-col=status]"),
        "idling",
    )
    .await;
    wait_text(
        client,
        &format!("tr[data-agent='{asked}'] [data-col=ghosts]"),
        "0/1 (0%)",
    )
    .await;
    assert_eq!(
        text(
            client,
            &format!("tr[data-agent='{asked}'] [data-col=status]")
        )
        .await,
        "active"
    );
    // The status filter finds the idler under idling, never under active.
    let status = client.find(Locator::Css("#filter-status")).await.unwrap();
    status.select_by_value("active").await.unwrap();
    wait_text(client, "#shown", "1 of 2 shown").await;
    let hidden = client
        .execute(
            "return document.querySelector(`tr[data-agent='${arguments[0]}']`).hidden",
            vec![json!(idler)],
        )
        .await
        .unwrap();
    assert_eq!(hidden, json!(true), "the idler is not among the active");
    browser.close().await;
    node.stop();
}

#[test]
fn without_chromium_the_tests_fail_under_ci_and_skip_elsewhere() {
    assert_eq!(when_missing(&[], true), Missing::Nothing);
    assert_eq!(
        when_missing(&["/usr/bin/chromium"], false),
        Missing::Skip(
            "skipped: chromium not installed (apt-get install chromium chromium-driver)".into()
        )
    );
    let Missing::Fail(message) = when_missing(&["/usr/bin/chromedriver"], true) else {
        panic!("CI must fail without the browser");
    };
    assert!(
        message.contains("/usr/bin/chromedriver") && message.contains("CI is set"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn liveness_goes_online_with_a_pulse_and_offline_when_silent() {
    let Some(tools) = browser_or_skip() else {
        return;
    };
    let _one = ONE_BROWSER.lock().unwrap_or_else(|e| e.into_inner());
    let node = start(None).await;
    let api = ApiClient::with_token(node.local_addr(), OPERATOR);
    // Judged offline after 3 s without a pulse.
    let spec = json!({"name": "pulser", "heartbeat": {"sources": ["on_demand"]},
        "liveness": {"pulse_interval_ms": 1_000, "offline_after_misses": 3}});
    let created = api.post_json("/v1/agents", &spec).await.unwrap();
    let pulser = created.json().unwrap()["agent"]["id"].as_u64().unwrap();
    let browser = Browser::start(&tools, WINDOW.0, WINDOW.1).await;
    let client = &browser.client;
    sign_in(client, &node, OPERATOR).await;
    let cell = format!("tr[data-agent='{pulser}'] [data-col=liveness]");
    wait_text(client, &cell, "unknown").await;
    assert_eq!(
        text(
            client,
            &format!("tr[data-agent='{pulser}'] [data-col=pulse]")
        )
        .await,
        "—"
    );

    let pulsed = api
        .post_json(
            &format!("/v1/agents/{pulser}/pulse"),
            &json!({"status": "busy"}),
        )
        .await
        .unwrap();
    assert_eq!(pulsed.status.as_u16(), 200);
    wait_text(client, &cell, "online").await;
    wait_text(client, "[data-count=online]", "1").await;
    wait_text(
        client,
        &format!("tr[data-agent='{pulser}'] [data-col=pulse]"),
        " ago",
    )
    .await;
    // Silent: the node's sweep records it offline, and the page shows it without a reload.
    wait_text(client, &cell, "offline").await;
    wait_text(client, "[data-count=online]", "0").await;
    browser.close().await;
    node.stop();
}
