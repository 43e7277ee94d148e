# syntax=docker/dockerfile:1
# sluice's container image: a build stage with the Rust toolchain and the wasm32-wasip2
# target, and a runtime stage with only what the binary links (glibc, CA certificates),
# the example plugins, and a non-root user. Build: `docker build -t sluice:0.1.0 .`
# (scripts/image.sh builds an equivalent image without a Docker engine).

FROM rust:1.95-slim-bookworm AS build
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends cmake g++ make perl pkg-config python3 \
    && rm -rf /var/lib/apt/lists/* \
    && rustup target add wasm32-wasip2
WORKDIR /src
COPY . .
# The plugins build for wasm32-wasip2 as part of the normal build (transform/build.rs).
RUN cargo build --release --locked --workspace --bins \
    && mkdir -p /out/plugins \
    && cp target/release/sluice /out/ \
    && cp target/plugins/wasm32-wasip2/release/*.wasm /out/plugins/

FROM debian:bookworm-slim
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 sluice \
    && useradd --system --uid 10001 --gid sluice --home-dir /var/lib/sluice --create-home sluice \
    && mkdir -p /etc/sluice /var/cache/sluice \
    && chown sluice:sluice /var/cache/sluice
COPY --from=build /out/sluice /usr/local/bin/sluice
COPY --from=build /out/plugins/ /usr/local/lib/sluice/plugins/
COPY schemas/ /usr/local/share/sluice/schemas/
COPY docs/ /usr/local/share/doc/sluice/
ENV SLUICE_CACHE_DIR=/var/cache/sluice
USER 10001:10001
WORKDIR /var/lib/sluice
# The admin API (when connectors.yaml has admin.listen: "0.0.0.0:8083"), and the metrics
# listener without the token (admin.metrics_listen: "0.0.0.0:9090").
EXPOSE 8083 9090
# SIGTERM: the batches in flight finish within 20 s, the process exits within 25 s.
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/sluice"]
CMD ["run", "--config", "/etc/sluice/connectors.yaml"]
