//! (d) Neighbour discovery: the input is two selector bytes and an ICMPv6 message (an NS or NA
//! with options, or anything), sent in IPv6 from one of a few sources to one of a few
//! destinations (see `nd_model::sources`, `destinations`) with hop limit 255 or not, its type,
//! code and target perhaps set, its checksum filled unless the selector says not, perhaps
//! behind a hop-by-hop header, received on eth1 or eth0 of `Rig6`. First `net`'s parse
//! (`nd::solicitation`, `nd::advertisement`) of the message and of the raw bytes must agree
//! with an independent reading of RFC 4861 (`nd_model`); then the graph must do what the model
//! says: the drop's node and reason, or exactly the advertisement it answers with (RFC 4861
//! 7.2.4), and report learned exactly the neighbour the message teaches. And the `ip6_input`
//! target's invariants: the ledger (every packet forwarded or dropped by name), buffers, frames.
#![no_main]

use std::cell::RefCell;

use graph_nodes::state::DataplaneEvent;
use graph_nodes::wire::nd;
use libfuzzer_sys::fuzz_target;
use quiver_fuzz::ip6::{
    check_sent, fill_icmp6_sum, ip6, multicast_mac, our_addresses, unspoofed, Rig6, HOST_C,
};
use quiver_fuzz::nd_model::{self, destinations, expect, sources, Outcome};
use quiver_fuzz::{eth, mac};

thread_local! {
    static RIG: RefCell<Rig6> = RefCell::new(Rig6::new());
}

/// `net`'s reading of `m` is the model's.
fn same_parse(m: &[u8]) {
    assert_eq!(
        nd::solicitation(m),
        nd_model::solicitation(m),
        "NS {m:02x?}"
    );
    assert_eq!(
        nd::advertisement(m),
        nd_model::advertisement(m),
        "NA {m:02x?}"
    );
}

fuzz_target!(|data: &[u8]| {
    let [s0, s1, raw @ ..] = data else {
        return;
    };
    let (s0, s1) = (*s0, *s1);
    same_parse(raw);
    let port = if s1 & 0x80 != 0 { 0 } else { 1 };
    let src = sources()[usize::from(s0 & 7)];
    let dst = destinations()[usize::from((s0 >> 3) & 7)];
    let hop = [255, 255, 64, 254][usize::from(s0 >> 6)];
    let mut m = raw[..raw.len().min(1200)].to_vec();
    match ((s1 >> 3) & 3, m.first_mut()) {
        (1, Some(t)) => *t = 135,
        (2, Some(t)) => *t = 136,
        _ => {}
    }
    if s1 & 0x20 != 0 && m.len() >= 2 {
        m[1] = 0;
    }
    let targets = [
        None,
        Some(quiver_fuzz::ip6::a6("fd00:2::fe")),
        Some(quiver_fuzz::ip6::eui64(mac(1))),
        Some(quiver_fuzz::ip6::a6("fd00:1::fe")),
    ];
    if let (Some(t), true) = (targets[usize::from((s1 >> 1) & 3)], m.len() >= 24) {
        m[8..24].copy_from_slice(&t);
    }
    if s1 & 1 == 0 {
        fill_icmp6_sum(&src, &dst, &mut m);
    }
    same_parse(&m);
    let packet = if s1 & 0x40 != 0 {
        // Hop-by-hop options first (a PadN of 4), then the message.
        let mut p = vec![58, 0, 1, 4, 0, 0, 0, 0];
        p.extend_from_slice(&m);
        ip6(src, dst, hop, 0, &p)
    } else {
        ip6(src, dst, hop, 58, &m)
    };
    let l2_to = if dst[0] == 0xff {
        multicast_mac(&dst)
    } else {
        mac(port as u8)
    };
    let frames = [(port, eth(l2_to, HOST_C, 0x86dd, &packet))];
    let (want, learned) = expect(port, src, dst, hop, &m);
    RIG.with_borrow_mut(|rig| {
        let counted = |rig: &Rig6| match want {
            Outcome::Dropped(node, reason) => rig.error(node, reason),
            Outcome::Answered(_) => rig.error("ip6-nd", "solicitations-answered"),
            Outcome::Resolving => rig.error("ip6-nd-resolve", "resolving"),
            Outcome::Other => 0,
        };
        let before = counted(rig);
        let (sent, events) = rig.inject(&frames);
        check_sent(&sent, &unspoofed(&frames, &our_addresses()));
        if want != Outcome::Other {
            assert_eq!(counted(rig) - before, 1, "{want:?} counted once");
        }
        match &want {
            Outcome::Answered(frame) => {
                assert_eq!(sent[port], vec![frame.clone()], "the advertisement");
                let mut others = sent.iter().enumerate().filter(|&(p, _)| p != port);
                assert!(others.all(|(_, s)| s.is_empty()), "only the advertisement");
            }
            Outcome::Dropped(..) => assert!(sent.iter().all(Vec::is_empty), "{want:?}"),
            Outcome::Resolving => {
                let (eth0, eth1, eth2) = (sent[0].len(), sent[1].len(), sent[2].len());
                assert!(
                    eth0 == 0 && eth1 <= 1 && eth2 == 0,
                    "a solicitation at most"
                )
            }
            Outcome::Other => {}
        }
        if want != Outcome::Other {
            let interface = rig.ports[port].index;
            let expected: Vec<DataplaneEvent> = learned
                .map(|(ip, mac)| DataplaneEvent::Neighbor6Learned { interface, ip, mac })
                .into_iter()
                .collect();
            assert_eq!(events, expected, "learned");
        }
    });
});
