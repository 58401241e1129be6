use super::*;
use crate::engine::breaker::FailureCause;
use crate::engine::run::RunId;
use crate::engine::wakeup::{WakeupId, WakeupSource};

fn spec(name: &str) -> AlertSinkSpec {
    AlertSinkSpec {
        name: name.into(),
        url: "https://hooks.example.com/vigil".into(),
        secret_env: "ALERT_KEY".into(),
        tenants: None,
        kinds: None,
        catch_up_s: None,
    }
}

fn one(spec: AlertSinkSpec) -> Result<AlertSink, String> {
    validate_sinks(&[spec]).map(|mut sinks| sinks.remove(0))
}

#[test]
fn a_plain_sink_takes_every_kind_and_tenant_and_the_default_catch_up() {
    let sink = one(spec("ops")).unwrap();
    assert_eq!(sink.kinds.len(), AlertKind::ALL.len());
    assert_eq!(sink.tenants, None);
    assert_eq!(sink.catch_up_ms, ALERT_CATCH_UP_DEFAULT_S * 1_000);
}

#[test]
fn the_number_of_sinks_is_bounded() {
    let sinks = |n: usize| (0..n).map(|i| spec(&format!("s{i}"))).collect::<Vec<_>>();
    assert!(validate_sinks(&sinks(ALERT_SINKS_MAX)).is_ok());
    let refused = validate_sinks(&sinks(ALERT_SINKS_MAX + 1)).unwrap_err();
    assert!(refused.contains("at most 16"), "{refused}");
    let twice = validate_sinks(&[spec("a"), spec("a")]).unwrap_err();
    assert!(twice.starts_with("alerts[1].name"), "{twice}");
}

#[test]
fn names_are_short_and_plain() {
    let longest = "n".repeat(ALERT_SINK_NAME_CHARS_MAX);
    assert!(one(spec(&longest)).is_ok());
    for bad in [
        String::new(),
        format!("{longest}n"),
        "Ops".into(),
        "o:ps".into(),
    ] {
        let refused = one(spec(&bad)).unwrap_err();
        assert!(refused.starts_with("alerts[0].name"), "{refused}");
    }
}

#[test]
fn url_and_secret_env_are_checked_and_named() {
    let url = one(AlertSinkSpec {
        url: "ftp://x".into(),
        ..spec("a")
    })
    .unwrap_err();
    assert!(url.starts_with("alerts[0].url"), "{url}");
    let longest = "K".repeat(ALERT_SECRET_ENV_CHARS_MAX);
    assert!(one(AlertSinkSpec {
        secret_env: longest.clone(),
        ..spec("a")
    })
    .is_ok());
    for bad in [String::new(), format!("{longest}K"), "A-B".into()] {
        let refused = one(AlertSinkSpec {
            secret_env: bad,
            ..spec("a")
        })
        .unwrap_err();
        assert!(refused.starts_with("alerts[0].secret_env"), "{refused}");
    }
}

#[test]
fn filters_are_bounded_and_never_empty() {
    let tenants = |n: usize| AlertSinkSpec {
        tenants: Some((0..n).map(|i| format!("t{i}")).collect()),
        ..spec("a")
    };
    assert!(one(tenants(ALERT_SINK_TENANTS_MAX)).is_ok());
    assert!(one(tenants(ALERT_SINK_TENANTS_MAX + 1))
        .unwrap_err()
        .starts_with("alerts[0].tenants"));
    assert!(one(tenants(0)).unwrap_err().contains("empty list"));
    let kinds = one(AlertSinkSpec {
        kinds: Some(vec![]),
        ..spec("a")
    })
    .unwrap_err();
    assert!(kinds.starts_with("alerts[0].kinds"), "{kinds}");
}

#[test]
fn the_catch_up_bound_is_taken_at_its_limits_and_refused_past_them() {
    let with = |s| {
        one(AlertSinkSpec {
            catch_up_s: Some(s),
            ..spec("a")
        })
    };
    assert_eq!(with(ALERT_CATCH_UP_MIN_S).unwrap().catch_up_ms, 1_000);
    assert!(with(ALERT_CATCH_UP_MAX_S).is_ok());
    assert!(with(ALERT_CATCH_UP_MIN_S - 1)
        .unwrap_err()
        .starts_with("alerts[0].catch_up_s"));
    assert!(with(ALERT_CATCH_UP_MAX_S + 1)
        .unwrap_err()
        .starts_with("alerts[0].catch_up_s"));
}

#[test]
fn kinds_parse_by_their_wire_names() {
    let file = crate::node_file::NodeFile::parse(
        "[[alerts]]\nname = \"ops\"\nurl = \"http://127.0.0.1:9/\"\nsecret_env = \"K\"\nkinds = [\"run_failed\", \"budget_reached\"]\n",
    )
    .unwrap();
    let sink = &file.alert_sinks()[0];
    assert_eq!(
        sink.kinds.iter().copied().collect::<Vec<_>>(),
        [AlertKind::BudgetReached, AlertKind::RunFailed]
    );
    let unknown = crate::node_file::NodeFile::parse(
        "[[alerts]]\nname = \"ops\"\nurl = \"http://x/\"\nsecret_env = \"K\"\nkinds = [\"run_done\"]\n",
    )
    .unwrap_err();
    assert!(unknown.contains("run_done"), "{unknown}");
    for kind in AlertKind::ALL {
        let text = serde_json::to_value(kind).unwrap();
        assert_eq!(text, kind.as_str());
    }
}

const DAY_MS: u64 = 24 * 60 * 60 * 1_000;

fn event(seq: u64, at_ms: u64, tenant: &str, kind: EventKind) -> Event {
    Event {
        seq,
        at_ms,
        tenant: tenant.into(),
        kind,
    }
}

fn finished(status: RunStatus) -> EventKind {
    EventKind::RunFinished {
        run: RunId(1),
        agent: AgentId(2),
        status,
        detail: "boom".into(),
        cause: None,
        stop_reason: None,
        report: None,
        error_class: None,
    }
}

fn refused(refusal: RefusalReason) -> EventKind {
    EventKind::WakeupRefused {
        wakeup: WakeupId(9),
        agent: AgentId(2),
        source: WakeupSource::OnDemand,
        reason: "r".into(),
        task_key: None,
        idempotency_key: None,
        requested_by: None,
        trigger_detail: None,
        refusal,
    }
}

#[test]
fn the_five_kinds_come_from_their_events_and_nothing_else() {
    let kind = |k| candidate(&event(1, 0, "t", k)).map(|(kind, _)| kind);
    assert_eq!(
        kind(finished(RunStatus::Failed)),
        Some(AlertKind::RunFailed)
    );
    assert_eq!(
        kind(finished(RunStatus::TimedOut)),
        Some(AlertKind::RunFailed)
    );
    assert_eq!(kind(finished(RunStatus::Cancelled)), None);
    assert_eq!(kind(finished(RunStatus::Succeeded)), None);
    assert_eq!(
        kind(refused(RefusalReason::DailyCap)),
        Some(AlertKind::DailyCapReached)
    );
    assert_eq!(
        kind(refused(RefusalReason::Budget)),
        Some(AlertKind::BudgetReached)
    );
    assert_eq!(kind(refused(RefusalReason::BreakerOpen)), None);
    let opened = EventKind::BreakerOpened {
        agent: AgentId(2),
        trigger: FailureCause::Llm,
        until_ms: 5,
        cooldown_ms: 5,
    };
    assert_eq!(kind(opened), Some(AlertKind::BreakerOpened));
    let offline = EventKind::AgentOffline {
        agent: AgentId(2),
        silent_ms: 1,
        report: Default::default(),
    };
    assert_eq!(kind(offline), Some(AlertKind::AgentOffline));
    assert_eq!(kind(EventKind::AgentResumed { agent: AgentId(2) }), None);
}

#[test]
fn a_refusal_alerts_once_per_agent_and_local_day() {
    let sink = one(spec("ops")).unwrap();
    let mut rules = AlertRules::new(&sink, BTreeMap::new());
    let utc = |_| "UTC".to_string();
    let first = rules
        .raised(
            &event(1, DAY_MS + 5, "t", refused(RefusalReason::DailyCap)),
            utc,
        )
        .unwrap();
    assert_eq!(first.day, Some(LocalDay(1)));
    // Not yet dealt with: the same refusal raises again (a retry after a crash).
    assert!(rules
        .raised(
            &event(1, DAY_MS + 5, "t", refused(RefusalReason::DailyCap)),
            utc
        )
        .is_some());
    rules.dealt_with(&first);
    assert_eq!(
        rules.raised(
            &event(2, DAY_MS + 9, "t", refused(RefusalReason::DailyCap)),
            utc
        ),
        None
    );
    // A budget refusal is its own kind; an earlier day (a clock set back) raises nothing.
    assert!(rules
        .raised(
            &event(3, DAY_MS + 9, "t", refused(RefusalReason::Budget)),
            utc
        )
        .is_some());
    assert_eq!(
        rules.raised(&event(4, 5, "t", refused(RefusalReason::DailyCap)), utc),
        None
    );
    let next_day = rules.raised(
        &event(5, 2 * DAY_MS, "t", refused(RefusalReason::DailyCap)),
        utc,
    );
    assert_eq!(next_day.unwrap().day, Some(LocalDay(2)));
    // The agent's own time zone decides the day: 01:00 UTC is still the day before in New York.
    let ny = rules.raised(
        &event(
            6,
            2 * DAY_MS + 3_600_000,
            "t",
            refused(RefusalReason::DailyCap),
        ),
        |_| "America/New_York".to_string(),
    );
    assert_eq!(ny, None);
}

#[test]
fn filters_keep_other_tenants_and_kinds_out() {
    let sink = one(AlertSinkSpec {
        tenants: Some(vec!["acme".into()]),
        kinds: Some(vec![AlertKind::RunFailed]),
        ..spec("ops")
    })
    .unwrap();
    let rules = AlertRules::new(&sink, BTreeMap::new());
    let utc = |_| "UTC".to_string();
    assert!(rules
        .raised(&event(1, 0, "acme", finished(RunStatus::Failed)), utc)
        .is_some());
    assert!(rules
        .raised(&event(1, 0, "other", finished(RunStatus::Failed)), utc)
        .is_none());
    assert!(rules
        .raised(&event(1, 0, "acme", refused(RefusalReason::DailyCap)), utc)
        .is_none());
}

#[test]
fn the_body_names_the_alert_and_carries_no_run_output() {
    let e = event(41, 7, "acme", finished(RunStatus::Failed));
    let raised = Raised {
        kind: AlertKind::RunFailed,
        agent: AgentId(2),
        day: None,
    };
    let body = alert_body("ops", &e, &raised, "triage");
    assert_eq!(body["id"], "ops:41");
    assert_eq!(body["kind"], "run_failed");
    assert_eq!(body["agent"]["name"], "triage");
    assert_eq!(body["detail"]["status"], "failed");
    assert!(body["detail"].get("report").is_none());
}
