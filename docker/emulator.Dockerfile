# The emulator image for the kind path (`make kind-up`): the `fakecloud` binary on a slim Debian base.
# Build from the repository root: docker build -f docker/emulator.Dockerfile -t fakecloud/emulator:dev .
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --locked --release --bin fakecloud

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/target/release/fakecloud /usr/local/bin/fakecloud
RUN useradd --system --home /var/lib/fakecloud --create-home fakecloud
USER fakecloud
WORKDIR /var/lib/fakecloud
EXPOSE 8787
# Listen on all interfaces so the kind nodes (and the CCM pod) reach it over the kind network.
ENTRYPOINT ["fakecloud", "serve", "--listen", "0.0.0.0:8787", "--db", "/var/lib/fakecloud/fakecloud.db"]
