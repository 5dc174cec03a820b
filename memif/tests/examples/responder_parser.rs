//! The responder's parser (`examples/common/reply.rs`) in-process: exact replies, a table of
//! malformed frames it must ignore (each with its reason), and property tests on random and
//! mutated frames.

use proptest::prelude::*;

use crate::frames::{
    arp_request, echo_request, expected_arp_reply, expected_echo_reply, garbage, host,
    inet_checksum, RESPONDER_IP, RESPONDER_MAC,
};
use crate::reply::{respond, Outcome};

#[test]
fn reply_answers_arp_and_echo_exactly() {
    let mut out = Vec::new();
    assert_eq!(
        respond(&host(), &arp_request(RESPONDER_IP), &mut out),
        Outcome::ArpReply
    );
    assert_eq!(out, expected_arp_reply());
    for (seq, len) in [(1u16, 0usize), (2, 56), (3, 1400), (4, 9)] {
        assert_eq!(
            respond(&host(), &echo_request(seq, len), &mut out),
            Outcome::EchoReply
        );
        assert_eq!(out, expected_echo_reply(seq, len), "payload {len}");
    }
}

#[test]
fn reply_ignores_a_table_of_malformed_frames() {
    let mut out = vec![1, 2, 3];
    for (what, frame, why) in garbage() {
        assert_eq!(
            respond(&host(), &frame, &mut out),
            Outcome::Ignored(why),
            "{what}"
        );
        assert!(out.is_empty(), "{what}: ignored frames leave no reply");
    }
}

/// A valid request of either kind, for mutation.
fn valid_request() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(arp_request(RESPONDER_IP)),
        (0usize..200).prop_map(|n| echo_request(7, n)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn reply_never_panics_on_random_bytes(frame in proptest::collection::vec(any::<u8>(), 0..200)) {
        let mut out = Vec::new();
        let o = respond(&host(), &frame, &mut out);
        prop_assert_eq!(matches!(o, Outcome::Ignored(_)), out.is_empty());
    }

    #[test]
    fn reply_never_panics_on_mutated_requests(
        frame in valid_request(),
        edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..6),
        cut in any::<usize>(),
    ) {
        let mut f = frame;
        for (at, b) in edits {
            let i = at % f.len();
            f[i] = b;
        }
        f.truncate(cut % (f.len() + 1));
        let mut out = Vec::new();
        let o = respond(&host(), &f, &mut out);
        // Whatever is answered is a well-formed frame from us with correct checksums.
        if o == Outcome::EchoReply {
            prop_assert_eq!(&out[6..12], &RESPONDER_MAC[..]);
            prop_assert_eq!(inet_checksum(&out[14..34]), 0);
            let total = usize::from(u16::from_be_bytes([out[16], out[17]]));
            prop_assert_eq!(inet_checksum(&out[34..14 + total]), 0);
        }
        if o == Outcome::ArpReply {
            prop_assert_eq!(&out[28..32], &RESPONDER_IP[..]);
        }
    }
}
