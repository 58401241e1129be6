//! The `http` adapter end to end (real tokio, real disk, real HTTP on loopback): a node whose
//! runs POST to a local webhook (`support/webhook_server.rs`) that verifies every signature with
//! its own HMAC; sync results, failures for the breaker, timeouts, a wrong key; async reports
//! through `POST /v1/runs/{id}/result` and every refused report; the signing key kept out of
//! everything the node stores or serves.

#[path = "support/webhook_server.rs"]
mod webhook_server;
#[path = "support/webhook_world.rs"]
mod webhook_world;

use serde_json::json;
use webhook_server::Webhook;
use webhook_world::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sync_webhook_gets_a_signed_wakeup_and_its_answer_is_the_result() {
    let (hookd, node) = (Webhook::start(SECRET).await, node("sync_ok").await);
    let agent = create(&node.api, hook("syncer", &hookd.url("/ok"), json!({}))).await;
    let run = run_once(&node.api, agent).await;
    assert_eq!(run["status"], "succeeded", "{run}");
    assert_eq!(
        run["report"]["answer_excerpt"], "done by the webhook",
        "{run}"
    );
    assert_eq!(run["usage"]["input_tokens"], 5, "{run}");
    assert_eq!(run["usage"]["cost_micro_usd"], 250_000, "{run}");
    let call = hookd.calls().pop().unwrap();
    assert!(call.verified, "the webhook's own HMAC must match: {call:?}");
    assert_eq!(call.path, "/ok");
    assert_eq!(
        call.timestamp_ms,
        Some(START_MS),
        "signed with the node's clock"
    );
    let id = run["id"].as_u64().unwrap();
    assert_eq!(call.body["agent"], json!({"id": agent, "name": "syncer"}));
    let sent = &call.body["run"];
    assert_eq!(
        (sent["id"].as_u64(), sent["number"].as_u64()),
        (Some(id), Some(0))
    );
    assert_eq!(
        (&sent["source"], &sent["reason"]),
        (&json!("on_demand"), &json!("go"))
    );
    assert_eq!(
        (&sent["payload"], &sent["task_key"]),
        (&json!({"n": 3}), &json!("t-1"))
    );
    assert_eq!(call.body["mode"], "sync");
    assert!(call.body.get("report_token").is_none(), "{}", call.body);
    let log = transcript(&node.api, id).await;
    assert!(
        log.contains("\"tool_call\"") && log.contains("done by the webhook"),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_failures_fail_the_run_with_a_class_and_count_on_the_breaker() {
    let (hookd, node) = (Webhook::start(SECRET).await, node("sync_failures").await);
    let api = &node.api;
    let five = create(api, hook("five", &hookd.url("/fail500"), json!({}))).await;
    let run = run_once(api, five).await;
    assert_failed(&run, "webhook_error", "500");
    assert_eq!(run["stop_reason"], "tool_error", "{run}");
    assert_eq!(
        breaker_tool_failures(&get(api, &format!("/v1/agents/{five}")).await),
        1
    );
    assert_failed(&run_once(api, five).await, "webhook_error", "500");
    assert_eq!(
        breaker_tool_failures(&get(api, &format!("/v1/agents/{five}")).await),
        2
    );

    let slow = create(
        api,
        hook("slow", &hookd.url("/hang"), json!({"timeout_ms": 200})),
    )
    .await;
    assert_failed(
        &run_once(api, slow).await,
        "webhook_error",
        "adapter.timeout_ms = 200",
    );
    let wrong = json!({"type": "http", "url": hookd.url("/ok"), "secret_env": WRONG_ENV});
    let wrong = create(api, json!({"name": "wrong", "adapter": wrong})).await;
    assert_failed(&run_once(api, wrong).await, "webhook_error", "401");
    assert!(
        !hookd.calls().last().unwrap().verified,
        "the webhook refused the wrong key"
    );
    let garbage = create(api, hook("garbage", &hookd.url("/garbage"), json!({}))).await;
    assert_failed(&run_once(api, garbage).await, "parse_error", "not a result");
    let said_no = create(
        api,
        hook("said_no", &hookd.url("/reported_failure"), json!({})),
    )
    .await;
    let run = run_once(api, said_no).await;
    assert_failed(&run, "webhook_error", "could not");
    assert_eq!(run["report"]["answer_excerpt"], "could not");
    let unset =
        json!({"type": "http", "url": hookd.url("/ok"), "secret_env": "VIGIL_NOT_SET_ANYWHERE"});
    let unset = create(api, json!({"name": "unset", "adapter": unset})).await;
    let calls_before = hookd.calls().len();
    assert_failed(
        &run_once(api, unset).await,
        "webhook_error",
        "VIGIL_NOT_SET_ANYWHERE",
    );
    assert_eq!(
        hookd.calls().len(),
        calls_before,
        "nothing unsigned is sent"
    );
    assert_eq!(
        breaker_tool_failures(&get(api, &format!("/v1/agents/{unset}")).await),
        0
    );
    assert_secret_nowhere(&node, &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_async_webhook_reports_with_its_run_token_and_every_other_report_is_refused() {
    let (hookd, node) = (Webhook::start(SECRET).await, node("async").await);
    let (api, addr) = (&node.api, node.addr);
    let spec = |name| {
        hook(
            name,
            &hookd.url("/async"),
            json!({"mode": "async", "report_wait_sec": 60}),
        )
    };
    let (first, second) = (
        create(api, spec("first")).await,
        create(api, spec("second")).await,
    );
    let (run, other) = (wake(api, first, "go").await, wake(api, second, "go").await);
    let call = hookd.call_of(run).await;
    assert!(call.verified, "{call:?}");
    assert_eq!(call.body["mode"], "async");
    assert_eq!(
        call.body["report_url"],
        format!("http://{addr}/v1/runs/{run}/result")
    );
    let token = call.body["report_token"].as_str().unwrap().to_string();
    let other_token = hookd.call_of(other).await.body["report_token"]
        .as_str()
        .unwrap()
        .to_string();
    let good = br#"{"status":"succeeded","output":"async done","usage":{"output_tokens":9}}"#;

    let refused = [
        (None, &good[..], 401, "unauthenticated"),
        (Some("vgl_run_unknown"), good, 401, "unauthenticated"),
        (Some(ACME), good, 401, "unauthenticated"),
        (Some(&other_token[..]), good, 403, "forbidden"),
        (
            Some(&token[..]),
            br#"{"status":"done"}"#,
            400,
            "invalid_field",
        ),
        (
            Some(&token[..]),
            br#"{"output":"no status"}"#,
            400,
            "invalid_field",
        ),
        (Some(&token[..]), b"garbage", 400, "invalid_json"),
    ];
    for (who, body, status, code) in refused {
        let (got, answer) = report(addr, who, run, body).await;
        assert_eq!(
            (got, answer["error"]["code"].as_str()),
            (status, Some(code)),
            "{answer}"
        );
        assert!(!answer.to_string().contains(SECRET), "{answer}");
        if status == 400 && code == "invalid_field" {
            assert_eq!(answer["error"]["field"], "status", "{answer}");
        }
    }
    assert_eq!(
        get(api, &format!("/v1/runs/{run}")).await["status"],
        "running"
    );
    let (status, answer) = report(addr, Some(&token), run, good).await;
    assert_eq!(status, 202, "{answer}");
    let ended = finished(api, run).await;
    assert_eq!(ended["status"], "succeeded", "{ended}");
    assert_eq!(ended["report"]["answer_excerpt"], "async done");
    assert_eq!(ended["usage"]["output_tokens"], 9);
    let (status, answer) = report(addr, Some(&token), run, good).await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (409, Some("already_reported")),
        "{answer}"
    );

    // A late report: the other run was cancelled while its webhook worked.
    let (status, _) = post(api, &format!("/v1/runs/{other}/cancel"), json!({})).await;
    assert_eq!(status, 200);
    let (status, answer) = report(addr, Some(&other_token), other, good).await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (409, Some("report_too_late")),
        "{answer}"
    );
    assert_eq!(finished(api, other).await["status"], "cancelled");
    let log = transcript(api, run).await;
    assert!(
        log.contains("[run token]") && log.contains("async done"),
        "{log}"
    );
    assert!(
        !log.contains(&token),
        "the run token stays out of the transcript, echoed or not"
    );
    assert_secret_nowhere(&node, &[&token, &other_token]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_async_run_without_a_report_fails_when_its_wait_runs_out_and_a_late_report_is_refused() {
    let (hookd, node) = (Webhook::start(SECRET).await, node("async_wait").await);
    let spec = hook(
        "patient",
        &hookd.url("/async"),
        json!({"mode": "async", "report_wait_sec": 1}),
    );
    let agent = create(&node.api, spec).await;
    let run = wake(&node.api, agent, "go").await;
    let token = hookd.call_of(run).await.body["report_token"]
        .as_str()
        .unwrap()
        .to_string();
    let ended = finished(&node.api, run).await;
    assert_failed(&ended, "webhook_error", "adapter.report_wait_sec = 1");
    let (status, answer) = report(node.addr, Some(&token), run, br#"{"status":"succeeded"}"#).await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (409, Some("report_too_late")),
        "{answer}"
    );
    assert_eq!(
        breaker_tool_failures(&get(&node.api, &format!("/v1/agents/{agent}")).await),
        1
    );

    // The run's own timeout ends the wait first when it is shorter; the token dies with it.
    let mut spec = hook(
        "hasty",
        &hookd.url("/async"),
        json!({"mode": "async", "report_wait_sec": 600}),
    );
    spec["limits"]["run_timeout_ms"] = json!(1_000);
    let hasty = create(&node.api, spec).await;
    let run = wake(&node.api, hasty, "go").await;
    let token = hookd.call_of(run).await.body["report_token"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(finished(&node.api, run).await["status"], "timed_out");
    let (status, answer) = report(node.addr, Some(&token), run, br#"{"status":"succeeded"}"#).await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (409, Some("report_too_late")),
        "{answer}"
    );
}

/// The `toml` blocks of docs/adapters/http.md, in order.
fn documented_toml() -> Vec<String> {
    let doc = include_str!("../docs/adapters/http.md");
    doc.split("```toml\n")
        .skip(1)
        .map(|block| block.split("```").next().unwrap().to_string())
        .collect()
}

#[test]
fn the_documented_example_is_a_valid_fleet_file_and_node_config() {
    let blocks = documented_toml();
    assert_eq!(blocks.len(), 2, "the fleet file and the node config");
    let fleet =
        vigil::fleet::Fleet::parse("http.md", &blocks[0]).expect("the fleet example parses");
    let agent = &fleet.tenants[0].agents[0];
    agent.validate().expect("the example agent is valid");
    assert!(matches!(
        agent.adapter,
        vigil::engine::agent::AdapterSpec::Http(_)
    ));
    let node = vigil::node_file::NodeFile::parse(&blocks[1]).expect("the node config parses");
    assert!(node.webhook.report_base_url.is_some());
}
