//! `InFlightLayer`: at most n requests in flight per key, each place given
//! back on every path a request can end by: its body's end, its body
//! dropped (the client left), an error, a panic, its future dropped.

use slidegate::store::memory::CompactString;
use std::convert::Infallible;
use std::time::Duration;

use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use slidegate::MemoryStore;
use slidegate::clock::ManualClock;
use slidegate::middleware::{InFlightLayer, Key};
use tower::{Layer, Service, ServiceExt, service_fn};

fn request(tenant: &str, mode: &str) -> Request<String> {
    Request::builder()
        .header("x-tenant", tenant)
        .header("x-mode", mode)
        .body(String::new())
        .unwrap()
}

/// One request of `tenant` in `mode` through `service`, once it is ready.
async fn send<S>(service: &mut S, tenant: &str, mode: &str) -> Result<S::Response, S::Error>
where
    S: Service<Request<String>>,
{
    service.ready().await?.call(request(tenant, mode)).await
}

/// The inner service: answers, fails, panics or never ends, as asked.
async fn inner(request: Request<String>) -> Result<Response<String>, &'static str> {
    match request.headers()["x-mode"].to_str().unwrap() {
        "fail" => Err("the handler failed"),
        "panic" => panic!("the handler panicked"),
        "stall" => {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Ok(Response::new(String::new()))
        }
        _ => Ok(Response::new("done".to_owned())),
    }
}

/// Asks until `want` (a place given back is released by a task), and
/// returns that answer (still holding its place when granted).
async fn eventually<S>(
    service: &mut S,
    tenant: &str,
    want: StatusCode,
) -> Response<slidegate::middleware::HeldBody<String>>
where
    S: Service<Request<String>, Response = Response<slidegate::middleware::HeldBody<String>>>,
    S::Error: std::fmt::Debug,
{
    for _ in 0..200 {
        let response = send(service, tenant, "ok").await.unwrap();
        if response.status() == want {
            return response;
        }
        drop(response);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("never answered {want}");
}

#[tokio::test]
async fn each_path_gives_its_place_back() {
    let layer = InFlightLayer::max_in_flight(
        MemoryStore::new(),
        Key::header(http::HeaderName::from_static("x-tenant")),
        1,
        Duration::from_secs(60),
    )
    .unwrap();
    let mut service = layer.layer(service_fn(inner));

    // Held while its body is not read; another key is not held back.
    let first = send(&mut service, "a", "ok").await.unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    let second = send(&mut service, "a", "ok").await.unwrap();
    assert_eq!(second.status(), StatusCode::TOO_MANY_REQUESTS);
    let other = send(&mut service, "b", "ok").await.unwrap();
    assert_eq!(other.status(), StatusCode::OK);
    // The body read to its end gives the place back.
    // (The body is kept: its end, not its drop, gives the place back.)
    let mut body = first.into_body();
    let frame = body.frame().await.unwrap().unwrap();
    assert_eq!(frame.into_data().unwrap(), "done");
    assert!(body.frame().await.is_none());
    let held = eventually(&mut service, "a", StatusCode::OK).await;
    assert_eq!(held.status(), StatusCode::OK);
    drop(body);
    let refused = send(&mut service, "a", "ok").await.unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    // The body dropped unread (the client left).
    drop(held);
    eventually(&mut service, "a", StatusCode::OK).await;

    // An error of the inner service.
    let failed = send(&mut service, "c", "fail").await;
    assert!(failed.is_err());
    eventually(&mut service, "c", StatusCode::OK).await;

    // A panic inside it.
    let call = service.ready().await.unwrap().call(request("d", "panic"));
    assert!(
        tokio::spawn(call).await.is_err(),
        "the panic reached the caller"
    );
    eventually(&mut service, "d", StatusCode::OK).await;

    // Its future dropped before it answered.
    let call = service.ready().await.unwrap().call(request("e", "stall"));
    assert!(
        tokio::time::timeout(Duration::from_millis(50), call)
            .await
            .is_err()
    );
    eventually(&mut service, "e", StatusCode::OK).await;
}

#[tokio::test]
async fn a_forgotten_place_comes_back_after_its_lease() {
    // A clock the test moves: on the system's, a stall of 200 ms between
    // the leak and the next request (a loaded machine) lets the lease run
    // out before the refusal is checked.
    let clock = ManualClock::new();
    let store: MemoryStore<CompactString, ManualClock> =
        MemoryStore::builder().clock(clock.clone()).build();
    let layer =
        InFlightLayer::max_in_flight(store, Key::global(), 1, Duration::from_millis(200)).unwrap();
    let mut service = layer.layer(service_fn(|_: Request<String>| async {
        Ok::<_, Infallible>(Response::new("x".to_owned()))
    }));
    let held = send(&mut service, "a", "ok").await.unwrap();
    // Leaked: as if the process holding it had died.
    std::mem::forget(held);
    let refused = send(&mut service, "a", "ok").await.unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    clock.advance(Duration::from_millis(199));
    let still = send(&mut service, "a", "ok").await.unwrap();
    assert_eq!(
        still.status(),
        StatusCode::TOO_MANY_REQUESTS,
        "held until its lease ends"
    );
    clock.advance(Duration::from_millis(1));
    let back = send(&mut service, "a", "ok").await.unwrap();
    assert_eq!(back.status(), StatusCode::OK);
}
