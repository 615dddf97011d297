# The CCM image for the kind path. Build from the repository root:
#   docker build -f docker/ccm.Dockerfile -t fakecloud/ccm:dev .
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --locked --release --bin fakecloud-ccm

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/target/release/fakecloud-ccm /usr/local/bin/fakecloud-ccm
USER 65532:65532
ENTRYPOINT ["fakecloud-ccm"]
