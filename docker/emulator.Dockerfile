# The emulator image for the kind path (`make kind-up`): the `fakecloud` binary on a slim Debian base.
# The binary is built on the host (`cargo build --release`) and staged into the build context by
# `fakecloud-kind images`, so the image builds the same with or without an image registry or the Rust
# package registry in reach of the build: nothing here downloads anything. By hand, from a directory holding
# the binary:
#   docker build -f docker/emulator.Dockerfile -t fakecloud/emulator:dev <dir with fakecloud>
FROM debian:bookworm-slim
COPY fakecloud /usr/local/bin/fakecloud
RUN useradd --system --home /var/lib/fakecloud --create-home fakecloud
USER fakecloud
WORKDIR /var/lib/fakecloud
# The database lives here: `docker kill` + `docker start` (the e2e suite's emulator crash) restarts on it.
VOLUME /var/lib/fakecloud
EXPOSE 8787
# Listen on all interfaces so the kind nodes (and the CCM pod) reach it over the kind network.
ENTRYPOINT ["fakecloud", "serve", "--listen", "0.0.0.0:8787", "--db", "/var/lib/fakecloud/fakecloud.db"]
