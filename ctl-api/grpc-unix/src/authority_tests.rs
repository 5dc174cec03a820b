use super::*;
use loona_hpack::Encoder;
use proptest::prelude::*;

const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const DATA: u8 = 0x0;
const SETTINGS: u8 = 0x4;

/// One frame as a client writes it.
fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    push_frame(&mut out, kind, flags, stream.to_be_bytes(), &[payload]);
    out
}

/// The headers of a gRPC call a C-core client makes on a unix socket.
fn grpc_call<'a>(authority: &'a [u8], path: &'a [u8]) -> Vec<(&'a [u8], &'a [u8])> {
    vec![
        (b":scheme".as_slice(), b"http".as_slice()),
        (b":method", b"POST"),
        (b":authority", authority),
        (b":path", path),
        (b"te", b"trailers"),
        (b"content-type", b"application/grpc"),
        (
            b"user-agent",
            b"grpc-python/1.76.0 grpc-c/50.0.0 (linux; chttp2)",
        ),
    ]
}

/// Every frame of `bytes` (after the preface): (type, flags, stream, payload).
fn frames(bytes: &[u8]) -> Vec<(u8, u8, u32, Vec<u8>)> {
    assert_eq!(&bytes[..24], PREFACE, "the preface passes unchanged");
    let mut rest = &bytes[24..];
    let mut out = Vec::new();
    while !rest.is_empty() {
        let len = payload_len(rest);
        let stream = u32::from_be_bytes(rest[5..9].try_into().unwrap());
        out.push((rest[3], rest[4], stream, rest[9..9 + len].to_vec()));
        rest = &rest[9 + len..];
    }
    out
}

/// The header lists of the rewritten HEADERS (+ CONTINUATION) blocks, decoded as h2 would.
fn decoded_blocks(bytes: &[u8]) -> Vec<Vec<(Vec<u8>, Vec<u8>)>> {
    let mut decoder = Decoder::new();
    let mut blocks = Vec::new();
    let mut block = Vec::new();
    for (kind, flags, _, payload) in frames(bytes) {
        match kind {
            HEADERS => {
                let skip = if flags & FLAG_PRIORITY != 0 { 5 } else { 0 };
                block = payload[skip..].to_vec();
            }
            CONTINUATION => block.extend_from_slice(&payload),
            _ => continue,
        }
        if flags & FLAG_END_HEADERS != 0 {
            assert!(
                !uses_dynamic_table(&block),
                "the rewritten block stays out of h2's dynamic table"
            );
            blocks.push(decoder.decode(&block).unwrap());
        }
    }
    blocks
}

/// Whether a block written by `encode_literal` adds to or reads the dynamic table: it never
/// should, so the first byte of every field is 0x00.
fn uses_dynamic_table(block: &[u8]) -> bool {
    let mut at = 0;
    while at < block.len() {
        if block[at] != 0 {
            return true;
        }
        at += 1;
        for _ in 0..2 {
            let (len, used) = read_int7(&block[at..]);
            at += used + len;
        }
    }
    false
}

fn read_int7(b: &[u8]) -> (usize, usize) {
    let mut value = usize::from(b[0] & 0x7f);
    if value < 0x7f {
        return (value, 1);
    }
    let mut shift = 0;
    let mut i = 1;
    loop {
        value += usize::from(b[i] & 0x7f) << shift;
        shift += 7;
        i += 1;
        if b[i - 1] & 0x80 == 0 {
            return (value, i);
        }
    }
}

fn rewrite_all(input: &[u8]) -> (Vec<u8>, u64) {
    let mut rewriter = Rewriter::new();
    let mut out = Vec::new();
    rewriter.feed(input, &mut out).unwrap();
    (out, rewriter.replaced())
}

fn owned(headers: &[(&[u8], &[u8])]) -> Vec<(Vec<u8>, Vec<u8>)> {
    headers
        .iter()
        .map(|(n, v)| (n.to_vec(), v.to_vec()))
        .collect()
}

/// Two calls on one connection, the second naming the first's headers through the client's
/// dynamic table, and the DATA between them.
fn two_calls(authority: &[u8]) -> Vec<u8> {
    let mut encoder = Encoder::new();
    let mut input = PREFACE.to_vec();
    input.extend(frame(SETTINGS, 0, 0, &[]));
    let first = encoder.encode(grpc_call(
        authority,
        b"/networkservice.NetworkService/Request",
    ));
    input.extend(frame(HEADERS, FLAG_END_HEADERS, 1, &first));
    input.extend(frame(DATA, FLAG_END_STREAM, 1, b"\0\0\0\0\x02hi"));
    let second = encoder.encode(grpc_call(
        authority,
        b"/networkservice.NetworkService/Close",
    ));
    assert!(second.len() < first.len(), "the second call is indexed");
    input.extend(frame(HEADERS, FLAG_END_HEADERS, 3, &second));
    input
}

#[test]
fn a_socket_path_authority_becomes_localhost_and_nothing_else_changes() {
    for authority in [&b"%2Ftmp%2Fquiver%2Fnsm.sock"[..], b"/tmp/quiver/nsm.sock"] {
        let (out, replaced) = rewrite_all(&two_calls(authority));
        assert_eq!(replaced, 2);
        let blocks = decoded_blocks(&out);
        assert_eq!(
            blocks,
            [
                owned(&grpc_call(
                    b"localhost",
                    b"/networkservice.NetworkService/Request"
                )),
                owned(&grpc_call(
                    b"localhost",
                    b"/networkservice.NetworkService/Close"
                )),
            ]
        );
        let kinds: Vec<_> = frames(&out).iter().map(|f| (f.0, f.1, f.2)).collect();
        assert_eq!(
            kinds,
            [
                (SETTINGS, 0, 0),
                (HEADERS, FLAG_END_HEADERS, 1),
                (DATA, FLAG_END_STREAM, 1),
                (HEADERS, FLAG_END_HEADERS, 3)
            ]
        );
        assert_eq!(
            frames(&out)[2].3,
            b"\0\0\0\0\x02hi",
            "DATA passes unchanged"
        );
    }
}

#[test]
fn a_valid_authority_is_kept() {
    let (out, replaced) = rewrite_all(&two_calls(b"localhost:5001"));
    assert_eq!(replaced, 0);
    let blocks = decoded_blocks(&out);
    assert_eq!(
        blocks[1][2],
        (b":authority".to_vec(), b"localhost:5001".to_vec())
    );
}

#[test]
fn bytes_fed_one_at_a_time_give_the_same_stream() {
    let input = two_calls(b"%2Frun%2Fquiver.sock");
    let (whole, _) = rewrite_all(&input);
    let mut rewriter = Rewriter::new();
    let mut out = Vec::new();
    for b in &input {
        rewriter.feed(std::slice::from_ref(b), &mut out).unwrap();
    }
    assert_eq!(out, whole);
}

#[test]
fn padding_priority_and_continuations_are_handled() {
    let mut encoder = Encoder::new();
    let block = encoder.encode(grpc_call(
        b"%2Fa.sock",
        b"/quiver.admin.Admin/ShowInterfaces",
    ));
    let (head, tail) = block.split_at(10);
    let mut payload = vec![3u8]; // pad length
    payload.extend_from_slice(&[0x80, 0, 0, 0, 16]); // exclusive dependency on 0, weight 16
    payload.extend_from_slice(head);
    payload.extend_from_slice(&[0, 0, 0]);
    let mut input = PREFACE.to_vec();
    input.extend(frame(
        HEADERS,
        FLAG_PADDED | FLAG_PRIORITY | FLAG_END_STREAM,
        5,
        &payload,
    ));
    input.extend(frame(CONTINUATION, FLAG_END_HEADERS, 5, tail));
    let (out, replaced) = rewrite_all(&input);
    assert_eq!(replaced, 1);
    let f = frames(&out);
    assert_eq!(f.len(), 1, "one HEADERS frame holds the block");
    assert_eq!(
        f[0].1,
        FLAG_PRIORITY | FLAG_END_STREAM | FLAG_END_HEADERS,
        "END_STREAM and PRIORITY kept, padding dropped"
    );
    assert_eq!(f[0].3[..5], [0x80, 0, 0, 0, 16]);
    assert_eq!(decoded_blocks(&out)[0][2].1, b"localhost");
}

#[test]
fn a_block_larger_than_a_frame_is_split_into_continuations() {
    let big = vec![b'x'; 40_000];
    let mut headers = grpc_call(b"%2Fa.sock", b"/p");
    headers.push((b"x-big", &big));
    let mut encoder = Encoder::new();
    let block = encoder.encode(headers.clone());
    let mut input = PREFACE.to_vec();
    // The client may send bigger frames when the server allows them.
    input.extend(frame(HEADERS, FLAG_END_HEADERS, 1, &block));
    let (out, _) = rewrite_all(&input);
    let f = frames(&out);
    assert_eq!(f.len(), 3);
    assert!(f.iter().all(|f| f.3.len() <= MAX_FRAME_PAYLOAD));
    assert_eq!((f[0].0, f[0].1), (HEADERS, 0));
    assert_eq!((f[1].0, f[1].1), (CONTINUATION, 0));
    assert_eq!((f[2].0, f[2].1), (CONTINUATION, FLAG_END_HEADERS));
    headers[2].1 = b"localhost";
    assert_eq!(decoded_blocks(&out)[0], owned(&headers));
}

#[test]
fn broken_framing_is_an_error_never_a_panic() {
    let mut encoder = Encoder::new();
    let block = encoder.encode(grpc_call(b"%2Fa.sock", b"/p"));
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (
            [frame(HEADERS, 0, 1, &block), frame(DATA, 0, 1, b"x")].concat(),
            "frame type 0x0 inside a header block",
        ),
        (
            [
                frame(HEADERS, 0, 1, &block),
                frame(CONTINUATION, FLAG_END_HEADERS, 3, &[]),
            ]
            .concat(),
            "frame type 0x9 inside a header block",
        ),
        (
            frame(CONTINUATION, FLAG_END_HEADERS, 1, &block),
            "CONTINUATION without HEADERS",
        ),
        (
            frame(HEADERS, FLAG_END_HEADERS | FLAG_PADDED, 1, &[200, 1, 2]),
            "shorter than its padding",
        ),
        (
            frame(HEADERS, FLAG_END_HEADERS | FLAG_PRIORITY, 1, &[1, 2]),
            "shorter than its padding",
        ),
        (frame(HEADERS, FLAG_END_HEADERS, 1, &[0xff]), "bad HPACK"),
        (
            [
                frame(HEADERS, 0, 1, &vec![0u8; 16_000]),
                vec![0x10, 0, 0, CONTINUATION, 0, 0, 0, 0, 1],
            ]
            .concat(),
            "more than 1048576 bytes",
        ),
    ];
    for (body, why) in cases {
        let mut rewriter = Rewriter::new();
        let mut out = Vec::new();
        let mut input = PREFACE.to_vec();
        input.extend(body);
        let err = rewriter.feed(&input, &mut out).unwrap_err();
        assert!(err.to_string().contains(why), "{err} does not say {why}");
    }
}

proptest! {
    #[test]
    fn any_bytes_are_rewritten_or_refused_without_a_panic(
        chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 0..16)
    ) {
        let mut rewriter = Rewriter::new();
        let mut out = Vec::new();
        let _ = rewriter.feed(PREFACE, &mut out);
        for chunk in chunks {
            if rewriter.feed(&chunk, &mut out).is_err() {
                break;
            }
        }
    }
}
