use super::*;
use crate::io::entropy::SeededEntropy;

fn tokens() -> SharedRunTokens {
    let tokens = RunTokens::shared();
    tokens.default_base_url("0.0.0.0:7070".parse().unwrap());
    tokens
}

fn ok() -> Result<WebhookResult, String> {
    Ok(WebhookResult {
        status: Some(ResultStatus::Succeeded),
        output: Some("done".into()),
        usage: None,
    })
}

fn refusal(answer: Result<(), ReportOrBody<String>>) -> ReportRefusal {
    match answer {
        Err(ReportOrBody::Refused(refusal)) => refusal,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn a_report_reaches_its_run_once_and_only_with_its_token() {
    let tokens = tokens();
    let entropy = SeededEntropy::shared(1);
    let mut grant = tokens.issue(RunId(7), &*entropy).unwrap();
    let other = tokens.issue(RunId(8), &*entropy).unwrap();
    assert!(grant.token.starts_with(RUN_TOKEN_PREFIX));
    assert_eq!(grant.report_url, "http://127.0.0.1:7070/v1/runs/7/result");
    let run = RunId(7);
    assert_eq!(
        refusal(tokens.report(run, None, false, ok())),
        ReportRefusal::NoToken
    );
    assert_eq!(
        refusal(tokens.report(run, Some("vgl_run_nope"), false, ok())),
        ReportRefusal::UnknownToken
    );
    assert_eq!(
        refusal(tokens.report(run, Some(&other.token), false, ok())),
        ReportRefusal::WrongRun(run)
    );
    // A bad body is answered to the token's holder, and does not use up the report.
    let bad = tokens.report(run, Some(&grant.token), false, Err("status".to_string()));
    assert!(matches!(bad, Err(ReportOrBody::Body(field)) if field == "status"));
    // The engine says the run is over while its task is still being dropped: too late.
    assert_eq!(
        refusal(tokens.report(run, Some(&grant.token), true, ok())),
        ReportRefusal::RunEnded(run)
    );
    tokens.report(run, Some(&grant.token), false, ok()).unwrap();
    assert_eq!(
        grant.report.try_recv().unwrap().output.as_deref(),
        Some("done")
    );
    assert_eq!(
        refusal(tokens.report(run, Some(&grant.token), false, ok())),
        ReportRefusal::AlreadyReported(run)
    );
    // Once the run stops waiting, its token is retired: still a second report, not a stranger.
    drop(grant);
    assert_eq!((tokens.live(), tokens.retired()), (1, 1));
    assert_eq!(
        refusal(tokens.report(run, Some(&other.token), false, ok())),
        ReportRefusal::WrongRun(run)
    );
    let run_8 = RunId(8);
    let token_8 = other.token.clone();
    drop(other);
    assert_eq!(
        refusal(tokens.report(run_8, Some(&token_8), false, ok())),
        ReportRefusal::RunEnded(run_8)
    );
}

#[test]
fn no_base_url_no_token() {
    let tokens = RunTokens::shared();
    let refused = tokens.issue(RunId(1), &*SeededEntropy::shared(1));
    assert_eq!(refused.err(), Some(ReportRefusal::NoReportAddress));
    tokens.set_base_url("https://vigil.example/");
    tokens.default_base_url("127.0.0.1:1".parse().unwrap());
    let grant = tokens.issue(RunId(1), &*SeededEntropy::shared(1)).unwrap();
    assert_eq!(grant.report_url, "https://vigil.example/v1/runs/1/result");
}

#[test]
fn live_tokens_stop_at_the_cap() {
    let tokens = tokens();
    let entropy = SeededEntropy::shared(2);
    let grants: Vec<_> = (0..RUN_TOKENS_LIVE_MAX as u64)
        .map(|n| tokens.issue(RunId(n), &*entropy).unwrap())
        .collect();
    let over = tokens.issue(RunId(u64::MAX), &*entropy);
    assert_eq!(over.err(), Some(ReportRefusal::TooManyWaiting));
    drop(grants);
    assert_eq!(tokens.live(), 0);
    assert!(tokens.issue(RunId(u64::MAX), &*entropy).is_ok());
}

#[test]
fn retired_tokens_are_forgotten_oldest_first_past_the_cap() {
    let tokens = tokens();
    let entropy = SeededEntropy::shared(3);
    let first = tokens.issue(RunId(0), &*entropy).unwrap();
    let first_token = first.token.clone();
    drop(first);
    for n in 1..RUN_TOKENS_RETIRED_MAX as u64 {
        drop(tokens.issue(RunId(n), &*entropy).unwrap());
    }
    assert_eq!(tokens.retired(), RUN_TOKENS_RETIRED_MAX);
    assert_eq!(
        refusal(tokens.report(RunId(0), Some(&first_token), false, ok())),
        ReportRefusal::RunEnded(RunId(0))
    );
    drop(tokens.issue(RunId(u64::MAX), &*entropy).unwrap());
    assert_eq!(tokens.retired(), RUN_TOKENS_RETIRED_MAX);
    assert_eq!(
        refusal(tokens.report(RunId(0), Some(&first_token), false, ok())),
        ReportRefusal::UnknownToken
    );
}
