use std::net::Ipv4Addr;
use std::sync::mpsc;
use std::time::Duration;

use super::*;

fn forwarder() -> Forwarder {
    test_forwarder()
}

fn drop_route(prefix: Ipv4Addr, len: u8) -> Change {
    Change::AddRoute {
        prefix: prefix.into(),
        len,
        via: Vec::new(),
        owner: Some("c1".into()),
    }
}

#[test]
fn changes_are_applied_in_order_and_show_in_the_next_view() {
    let owner = ConfigOwner::start(forwarder(), Duration::from_millis(1));
    let control = owner.control();
    let before = control.view();
    assert!(before.routes.is_empty());

    let applied = control
        .apply(Change::All(vec![
            drop_route(Ipv4Addr::new(192, 0, 2, 0), 24),
            drop_route(Ipv4Addr::new(198, 51, 100, 0), 24),
        ]))
        .unwrap();
    assert_eq!(applied, Applied::All(vec![Applied::Done, Applied::Done]));
    let after = control.view();
    let prefixes: Vec<_> = after.routes.iter().map(|r| (r.prefix, r.len)).collect();
    assert_eq!(
        prefixes,
        [
            (u32::from(Ipv4Addr::new(192, 0, 2, 0)), 24),
            (u32::from(Ipv4Addr::new(198, 51, 100, 0)), 24)
        ]
    );
    assert_eq!(after.owned_by("c1").len(), 2);
    assert!(
        before.routes.is_empty(),
        "a view taken earlier does not change"
    );

    // A refused change: a clear error, nothing changed.
    let refused = control.apply(Change::AddRoute {
        prefix: Ipv4Addr::new(10, 0, 0, 0).into(),
        len: 8,
        via: vec![(Ipv4Addr::new(10, 0, 0, 1).into(), "nosuch".into())],
        owner: None,
    });
    assert_eq!(
        refused,
        Err(ForwarderError::NotFound("no port named `nosuch`".into()))
    );
    assert_eq!(control.view().routes.len(), 2);
    assert!(
        Arc::ptr_eq(&control.view().routes, &after.routes),
        "the route list is shared while no route changes"
    );

    let removed = control
        .apply(Change::RemoveOwned { owner: "c1".into() })
        .unwrap();
    assert_eq!(removed, Applied::Removed(2));
    assert!(control.view().routes.is_empty());
    assert!(control.view().owned.is_empty());

    let f = owner.stop().unwrap();
    f.stop();
    assert_eq!(
        control.apply(Change::SetVxlanPort(4789)),
        Err(ForwarderError::Unavailable(
            "the forwarder has stopped".into()
        ))
    );
}

#[test]
fn readers_never_wait_behind_a_change_in_progress() {
    let owner = ConfigOwner::start(forwarder(), Duration::from_millis(1));
    let control = owner.control();
    control
        .apply(drop_route(Ipv4Addr::new(192, 0, 2, 0), 24))
        .unwrap();
    // Hold the owner busy until told to go on.
    let (go_on, wait) = mpsc::channel::<()>();
    let (started, is_busy) = mpsc::channel::<()>();
    let busy = control.clone();
    let holder = std::thread::spawn(move || {
        busy.inspect(move |_| {
            started.send(()).unwrap();
            wait.recv().unwrap();
        })
    });
    is_busy.recv().unwrap();
    // While the owner is busy: a change waits, a reader does not.
    let writer = control.clone();
    let queued =
        std::thread::spawn(move || writer.apply(Change::RemoveOwned { owner: "c1".into() }));
    let reader = control.clone();
    let (read, seen) = mpsc::channel();
    std::thread::spawn(move || {
        let v = reader.view();
        read.send((v.routes.len(), reader.dataplane().runtime().workers.len()))
            .unwrap();
    });
    let got = seen.recv_timeout(Duration::from_secs(30));
    assert_eq!(got, Ok((1, 1)), "the reader waited for the busy owner");
    assert!(!queued.is_finished(), "a change ran beside another");
    go_on.send(()).unwrap();
    holder.join().unwrap().unwrap();
    assert_eq!(queued.join().unwrap(), Ok(Applied::Removed(1)));
    assert!(control.view().routes.is_empty());
    owner.stop().unwrap().stop();
}

#[test]
fn a_handle_kept_after_the_stop_pins_no_port() {
    let owner = ConfigOwner::start(forwarder(), Duration::from_millis(1));
    let control = owner.control();
    let dir = std::env::temp_dir().join(format!("quiver-owner-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let port = crate::config::Config::parse(&format!(
        "[[port]]\nname = \"m0\"\ntype = \"memif\"\nrole = \"master\"\nsocket = \"{}\"\n",
        dir.join("m.sock").display()
    ))
    .unwrap()
    .port
    .remove(0);
    let applied = control
        .apply(Change::AddPort { port, owner: None })
        .unwrap();
    assert!(matches!(applied, Applied::Interface(_)));
    let view = control.view();
    let port = view.port("m0").unwrap().port.clone();
    drop(view);
    // Held by the forwarder, by the published view and here.
    assert!(Arc::strong_count(&port) >= 3);
    let f = owner.stop().unwrap();
    assert!(control.view().ports.is_empty());
    drop(f);
    assert_eq!(
        Arc::strong_count(&port),
        1,
        "only this test holds the port now"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Something whose close (drop) waits until the test lets it go, then says it closed.
struct SlowToClose {
    go: mpsc::Receiver<()>,
    closed: mpsc::Sender<()>,
}

impl Drop for SlowToClose {
    fn drop(&mut self) {
        let _ = self.go.recv();
        let _ = self.closed.send(());
    }
}

/// A `SlowToClose`, the sender that lets it close and the receiver told when it has.
fn slow_to_close() -> (SlowToClose, mpsc::Sender<()>, mpsc::Receiver<()>) {
    let (go_on, go) = mpsc::channel();
    let (closed, has_closed) = mpsc::channel();
    (SlowToClose { go, closed }, go_on, has_closed)
}

#[test]
fn a_change_is_answered_once_what_it_left_is_closed_and_other_changes_do_not_wait() {
    let owner = ConfigOwner::start(forwarder(), Duration::from_millis(1));
    let control = owner.control();
    let (slow, go_on, has_closed) = slow_to_close();
    // Sent first: the owner applies it before the change below.
    let answered = control.dispose_for_test(Box::new(slow));
    let other = control.clone();
    let (done, other_done) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(other.apply(drop_route(Ipv4Addr::new(192, 0, 2, 0), 24)));
    });
    assert_eq!(
        other_done.recv_timeout(Duration::from_secs(30)),
        Ok(Ok(Applied::Done)),
        "another client's change waited behind a close"
    );
    assert!(answered.try_recv().is_err(), "answered before it closed");
    assert!(has_closed.try_recv().is_err());
    go_on.send(()).unwrap();
    assert_eq!(answered.recv().unwrap(), Ok(Applied::Done));
    assert!(
        has_closed.try_recv().is_ok(),
        "closed before it was answered"
    );

    // What is left to close when the owner stops is closed before the forwarder comes back.
    let (slow, go_on, has_closed) = slow_to_close();
    let _answer = control.dispose_for_test(Box::new(slow));
    go_on.send(()).unwrap();
    owner.stop().unwrap().stop();
    assert!(
        has_closed.try_recv().is_ok(),
        "the stop did not wait for the close"
    );
}
