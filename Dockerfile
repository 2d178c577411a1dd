# syntax=docker/dockerfile:1
#
# slidegate in a container: built in one stage, run from a slim one as an
# unprivileged user, with a health check.
#
#   docker build -t slidegate:0.1.0 .
#   docker run --rm -p 8080:8080 -p 8081:8081 slidegate:0.1.0
#   docker run --rm -p 8080:8080 -p 8081:8081 -v "$PWD/docs/examples:/rules:ro" \
#       -e SLIDEGATE_STORE=redis://redis.internal:6379 slidegate:0.1.0 serve --config /rules/rules.yaml
#
# docs/DEPLOYING.md says what of this recipe is tested and what is not.

# The build stage uses the same Debian release as the run stage, so the
# binary links against the glibc it will run with.
FROM rust:1.95-slim-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p slidegate-server --bin slidegate

FROM debian:bookworm-slim
COPY --from=build /src/target/release/slidegate /usr/local/bin/slidegate
# Not root: a numeric, unprivileged user with no entry, home or shell
# (numeric, so Kubernetes' runAsNonRoot can check it).
USER 65532:65532
# Listen on every interface inside the container (the binary's default is
# loopback only). JSON logs for the collector; no colour, stderr is no
# terminal.
ENV SLIDEGATE_HTTP_ADDR=0.0.0.0:8080 \
    SLIDEGATE_GRPC_ADDR=0.0.0.0:8081 \
    SLIDEGATE_LOG_FORMAT=json
EXPOSE 8080 8081
# Liveness, not readiness: /healthz answers while the process serves, also
# when the store is down (decisions then come from --on-store-error); use
# /readyz for a load balancer. The image has no HTTP client: bash's
# /dev/tcp speaks to the port of SLIDEGATE_HTTP_ADDR.
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
    CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/${SLIDEGATE_HTTP_ADDR##*:} && printf 'GET /healthz HTTP/1.1\\r\\nHost: localhost\\r\\nConnection: close\\r\\n\\r\\n' >&3 && head -c 12 <&3 | grep -q ' 200'"]
# SIGTERM: stop accepting, answer what is in flight (--shutdown-grace), exit 0.
STOPSIGNAL SIGTERM
ENTRYPOINT ["slidegate"]
CMD ["serve"]
