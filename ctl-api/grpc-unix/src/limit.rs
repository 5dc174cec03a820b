//! A request message over a server's size limit answered `RESOURCE_EXHAUSTED`, as gRPC's
//! status codes say (`doc/statuscodes.md`: "request or response message larger than the
//! limit"); tonic answers it `OUT_OF_RANGE`.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tonic::codegen::http;
use tonic::codegen::Service;
use tonic::server::NamedService;
use tonic::{Code, Status};

/// What tonic's decoder says of a message over the limit (`tonic::codec::decode`).
const TOO_LARGE: &str = "Error, decoded message length too large";

/// A tonic service whose answer to a request over its decoding limit
/// (`max_decoding_message_size`) is `RESOURCE_EXHAUSTED` instead of tonic's `OUT_OF_RANGE`;
/// every other answer passes untouched. Wrap the generated server:
/// `MessageLimit(FooServer::new(s).max_decoding_message_size(n))`.
#[derive(Debug, Clone)]
pub struct MessageLimit<S>(pub S);

impl<S: NamedService> NamedService for MessageLimit<S> {
    const NAME: &'static str = S::NAME;
}

impl<S, B, RB> Service<http::Request<B>> for MessageLimit<S>
where
    S: Service<http::Request<B>, Response = http::Response<RB>>,
    S::Future: Send + 'static,
{
    type Response = http::Response<RB>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let answer = self.0.call(req);
        Box::pin(async move {
            let mut answer = answer.await?;
            oversize_is_resource_exhausted(answer.headers_mut());
            Ok(answer)
        })
    }
}

/// Rewrites a trailers-only answer (a unary or server-streaming call whose request could not
/// be decoded) that says the request was over the limit.
fn oversize_is_resource_exhausted(headers: &mut http::HeaderMap) {
    let Some(status) = Status::from_header_map(headers) else {
        return;
    };
    if status.code() != Code::OutOfRange || !status.message().starts_with(TOO_LARGE) {
        return;
    }
    let exhausted = Status::resource_exhausted(format!(
        "request message too large: {}",
        status.message().trim_start_matches("Error, ")
    ));
    if exhausted.add_header(headers).is_err() {
        // The message cannot be a header: the code alone says it.
        headers.remove("grpc-message");
        headers.insert(
            "grpc-status",
            http::HeaderValue::from(Code::ResourceExhausted as i32),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers_of(status: Status) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        status.add_header(&mut h).unwrap();
        h
    }

    #[test]
    fn only_tonics_too_large_becomes_resource_exhausted() {
        let mut h = headers_of(Status::out_of_range(
            "Error, decoded message length too large: found 5000000 bytes, the limit is: \
             4194304 bytes",
        ));
        oversize_is_resource_exhausted(&mut h);
        let s = Status::from_header_map(&h).unwrap();
        assert_eq!(s.code(), Code::ResourceExhausted);
        assert!(s.message().contains("found 5000000 bytes"), "{s:?}");

        for other in [
            Status::out_of_range("index 7 is out of range"),
            Status::invalid_argument("Error, decoded message length too large"),
        ] {
            let mut h = headers_of(other.clone());
            oversize_is_resource_exhausted(&mut h);
            let s = Status::from_header_map(&h).unwrap();
            assert_eq!((s.code(), s.message()), (other.code(), other.message()));
        }
        let mut none = http::HeaderMap::new();
        oversize_is_resource_exhausted(&mut none);
        assert!(none.is_empty());
    }
}
