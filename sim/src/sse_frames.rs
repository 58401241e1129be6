//! The Server-Sent Events frames of `GET /v1/events` as a client reads them (`sse_reader`):
//! kept apart from the reader (madsim only) so that it is tested in every build.

use vigil::engine::event::Event;

/// Takes every complete frame (ended by a blank line) off `buffer`: the events their `data:`
/// lines carry, in order. Keepalive comments carry none.
pub fn take_events(buffer: &mut String) -> Vec<Event> {
    let mut events = Vec::new();
    while let Some(end) = buffer.find("\n\n") {
        let frame: String = buffer.drain(..end + 2).collect();
        for line in frame.lines() {
            if let Some(data) = line.strip_prefix("data: ") {
                let event: Event = serde_json::from_str(data).expect("stream frames carry events");
                events.push(event);
            }
        }
    }
    events
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn complete_frames_are_taken_and_a_partial_one_waits() {
        let event = |seq: u64| {
            format!(
                "id: {seq}\nevent: agent_resumed\ndata: {{\"seq\":{seq},\"at_ms\":1,\"tenant\":\"default\",\"type\":\"agent_resumed\",\"agent\":1}}\n\n"
            )
        };
        let mut buffer = format!(": keepalive\n\n{}{}", event(4), event(5));
        let partial = event(6);
        buffer.push_str(&partial[..20]);
        let seqs: Vec<u64> = take_events(&mut buffer).iter().map(|e| e.seq).collect();
        assert_eq!(seqs, [4, 5]);
        assert_eq!(buffer, &partial[..20]);
        buffer.push_str(&partial[20..]);
        assert_eq!(take_events(&mut buffer)[0].seq, 6);
        assert!(buffer.is_empty());
    }
}
