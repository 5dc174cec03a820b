//! Which of a network service's endpoints may serve a connection: the service's `matches`
//! against the connection's labels and the endpoints' labels, with the semantics of NSM's sdk
//! (`pkg/tools/matchutils`, `MatchEndpoint`), which cmd-forwarder-vpp's `discover` applies.
//!
//! - A service without matches: every endpoint.
//! - Otherwise the first match whose `source_selector` is a subset of the connection's labels
//!   decides: the endpoints whose labels for the service fit a `destination_selector` of one of
//!   its routes (once per route they fit, so an endpoint named by two routes is there twice, as
//!   in the sdk). A match that finds none passes on to the next when it has `fallthrough`; one
//!   with `metadata` but no routes yields every endpoint; any other ends the search with none.
//! - No match whose source selector fits: no endpoint.
//!
//! A selector value may be a template over the connection's labels, as the sdk's Go
//! `text/template` is: only the simple form `{{.name}}` (spaces allowed inside the braces) is
//! expanded here, a label the connection lacks giving `<no value>` as Go's does; any other
//! template is compared as it is written (as the sdk does when Go cannot parse it).

use std::collections::HashMap;

use nsm_proto::registry::{NetworkService, NetworkServiceEndpoint};

/// What Go's `text/template` prints for a key the map lacks.
const NO_VALUE: &str = "<no value>";

/// The endpoints of `nses` that may serve a connection with `labels` for `service` (see the
/// module's documentation), in the order of the routes, then of `nses`.
pub fn match_endpoints<'a>(
    labels: &HashMap<String, String>,
    service: &NetworkService,
    nses: &'a [NetworkServiceEndpoint],
) -> Vec<&'a NetworkServiceEndpoint> {
    if service.matches.is_empty() {
        return nses.iter().collect();
    }
    let none = HashMap::new();
    for m in &service.matches {
        if !is_subset(labels, &m.source_selector, labels) {
            continue;
        }
        let mut found = Vec::new();
        for route in &m.routes {
            for nse in nses {
                let nse_labels = nse
                    .network_service_labels
                    .get(&service.name)
                    .map_or(&none, |l| &l.labels);
                let fits = is_subset(nse_labels, &route.destination_selector, labels);
                if fits {
                    found.push(nse);
                }
            }
        }
        if m.fallthrough && found.is_empty() {
            continue;
        }
        if m.metadata.is_some() && m.routes.is_empty() && found.is_empty() {
            return nses.iter().collect();
        }
        return found;
    }
    Vec::new()
}

/// Whether every label of `selector` is in `labels` with the same value, or with the value
/// the selector's template gives over `values` (the sdk's `IsSubset`). A label missing from
/// `labels` counts as the empty value.
pub fn is_subset(
    labels: &HashMap<String, String>,
    selector: &HashMap<String, String>,
    values: &HashMap<String, String>,
) -> bool {
    if labels.len() < selector.len() {
        return false;
    }
    selector.iter().all(|(k, want)| {
        let have = labels.get(k).map_or("", String::as_str);
        have == want || have == expand(want, values)
    })
}

/// `template` with each `{{.name}}` replaced by `values[name]` (or `<no value>`); `template`
/// itself when it has any other action, or braces that do not close.
pub fn expand(template: &str, values: &HashMap<String, String>) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(open) = rest.find("{{") {
        out.push_str(&rest[..open]);
        let after = &rest[open + 2..];
        let Some(close) = after.find("}}") else {
            return template.to_string();
        };
        let Some(name) = field_name(&after[..close]) else {
            return template.to_string();
        };
        out.push_str(values.get(name).map_or(NO_VALUE, String::as_str));
        rest = &after[close + 2..];
    }
    out.push_str(rest);
    out
}

/// The `name` of an action `.name` (surrounding spaces allowed), if that is all it is.
fn field_name(action: &str) -> Option<&str> {
    let name = action
        .trim_matches(|c| c == ' ' || c == '\t')
        .strip_prefix('.')?;
    let mut chars = name.chars();
    let first = chars.next()?;
    let ident =
        (first.is_alphabetic() || first == '_') && chars.all(|c| c.is_alphanumeric() || c == '_');
    ident.then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nsm_proto::registry::{Destination, Match, Metadata, NetworkServiceLabels};

    fn map(kv: &[(&str, &str)]) -> HashMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn nse(name: &str, labels: &[(&str, &str)]) -> NetworkServiceEndpoint {
        NetworkServiceEndpoint {
            name: name.into(),
            network_service_names: vec!["svc".into()],
            network_service_labels: HashMap::from([(
                "svc".to_string(),
                NetworkServiceLabels {
                    labels: map(labels),
                },
            )]),
            ..Default::default()
        }
    }

    fn route(selector: &[(&str, &str)]) -> Destination {
        Destination {
            destination_selector: map(selector),
            weight: 0,
        }
    }

    fn service(matches: Vec<Match>) -> NetworkService {
        NetworkService {
            name: "svc".into(),
            payload: "IP".into(),
            matches,
            ..Default::default()
        }
    }

    fn names(found: Vec<&NetworkServiceEndpoint>) -> Vec<&str> {
        found.iter().map(|n| n.name.as_str()).collect()
    }

    #[test]
    fn without_matches_every_endpoint() {
        let nses = [nse("a", &[]), nse("b", &[("x", "1")])];
        assert_eq!(
            names(match_endpoints(&map(&[]), &service(vec![]), &nses)),
            ["a", "b"]
        );
    }

    #[test]
    fn the_first_match_whose_source_fits_decides() {
        let nses = [
            nse("blue", &[("color", "blue")]),
            nse("red", &[("color", "red")]),
        ];
        let svc = service(vec![
            Match {
                source_selector: map(&[("app", "red-client")]),
                routes: vec![route(&[("color", "red")])],
                ..Default::default()
            },
            Match {
                source_selector: map(&[]),
                routes: vec![route(&[("color", "blue")])],
                ..Default::default()
            },
        ]);
        let red = map(&[("app", "red-client")]);
        assert_eq!(names(match_endpoints(&red, &svc, &nses)), ["red"]);
        assert_eq!(names(match_endpoints(&map(&[]), &svc, &nses)), ["blue"]);
    }

    #[test]
    fn a_match_without_fitting_endpoint_ends_the_search_unless_it_falls_through() {
        let nses = [nse("blue", &[("color", "blue")])];
        let first = |fallthrough| Match {
            routes: vec![route(&[("color", "green")])],
            fallthrough,
            ..Default::default()
        };
        let second = Match {
            routes: vec![route(&[("color", "blue")])],
            ..Default::default()
        };
        let stop = service(vec![first(false), second.clone()]);
        assert!(match_endpoints(&map(&[]), &stop, &nses).is_empty());
        let on = service(vec![first(true), second]);
        assert_eq!(names(match_endpoints(&map(&[]), &on, &nses)), ["blue"]);
    }

    #[test]
    fn metadata_without_routes_is_every_endpoint_and_no_source_fits_is_none() {
        let nses = [nse("a", &[]), nse("b", &[])];
        let meta = service(vec![Match {
            metadata: Some(Metadata::default()),
            ..Default::default()
        }]);
        assert_eq!(names(match_endpoints(&map(&[]), &meta, &nses)), ["a", "b"]);
        let other = service(vec![Match {
            source_selector: map(&[("app", "x")]),
            routes: vec![route(&[])],
            ..Default::default()
        }]);
        assert!(match_endpoints(&map(&[("app", "y")]), &other, &nses).is_empty());
    }

    #[test]
    fn an_endpoint_fitting_two_routes_is_there_twice_and_labels_of_other_services_do_not_count() {
        let mut other = nse("other", &[]);
        other.network_service_labels = HashMap::from([(
            "another".to_string(),
            NetworkServiceLabels {
                labels: map(&[("color", "blue")]),
            },
        )]);
        let nses = [nse("blue", &[("color", "blue"), ("size", "s")]), other];
        let svc = service(vec![Match {
            routes: vec![route(&[("color", "blue")]), route(&[("size", "s")])],
            ..Default::default()
        }]);
        assert_eq!(
            names(match_endpoints(&map(&[]), &svc, &nses)),
            ["blue", "blue"]
        );
    }

    #[test]
    fn templates_take_the_connections_labels() {
        let nses = [
            nse("n1", &[("node", "node-1")]),
            nse("n2", &[("node", "node-2")]),
        ];
        let svc = service(vec![Match {
            routes: vec![route(&[("node", "{{ .nodeName }}")])],
            ..Default::default()
        }]);
        let on2 = map(&[("nodeName", "node-2")]);
        assert_eq!(names(match_endpoints(&on2, &svc, &nses)), ["n2"]);
        assert!(match_endpoints(&map(&[]), &svc, &nses).is_empty());
    }

    #[test]
    fn expand_simple_fields_only() {
        let v = map(&[("a", "1"), ("b_2", "x")]);
        assert_eq!(expand("pre-{{.a}}-{{ .b_2 }}", &v), "pre-1-x");
        assert_eq!(expand("{{.missing}}", &v), "<no value>");
        assert_eq!(expand("{{index . \"a\"}}", &v), "{{index . \"a\"}}");
        assert_eq!(expand("{{.a", &v), "{{.a");
        assert_eq!(expand("{{.a-b}}", &v), "{{.a-b}}");
        assert_eq!(expand("plain", &v), "plain");
    }

    #[test]
    fn subset_counts_missing_labels_as_empty_and_checks_sizes() {
        let labels = map(&[("a", "1")]);
        assert!(is_subset(&labels, &map(&[("a", "1")]), &map(&[])));
        assert!(!is_subset(&labels, &map(&[("a", "2")]), &map(&[])));
        assert!(!is_subset(
            &labels,
            &map(&[("a", "1"), ("b", "")]),
            &map(&[])
        ));
        assert!(is_subset(
            &map(&[("a", "1"), ("c", "3")]),
            &map(&[("b", "")]),
            &map(&[])
        ));
    }
}
