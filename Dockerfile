# syntax=docker/dockerfile:1
#
# A static llmgate in a distroless image: no shell, CA certificates
# included, running as the unprivileged user "nonroot" (65532).
#
#   docker build -t llmgate \
#     --build-arg VERSION="$(git describe --tags --always --dirty)" \
#     --build-arg REVISION="$(git rev-parse HEAD)" \
#     --build-arg REVISION_TIME="$(TZ=UTC git show -s --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ HEAD)" .
#   docker run --rm -p 127.0.0.1:4000:4000 llmgate --demo
#   docker run -d -p 4000:4000 -v llmgate-data:/data -v "$PWD/llmgate.yaml:/etc/llmgate/llmgate.yaml:ro" \
#     -e LLMGATE_MASTER_KEY llmgate -c /etc/llmgate/llmgate.yaml
#
# The build context has no .git (.dockerignore), so the version and the
# revision come in as build arguments.

ARG GO_VERSION=1.26

FROM golang:${GO_VERSION} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG REVISION=
ARG REVISION_TIME=
ARG MODIFIED=false
# scripts/build.sh is the one release build: CGO_ENABLED=0 (static),
# -trimpath, -buildvcs=false, -ldflags "-s -w -X main.version=… -X
# main.revision=… -X main.revisionTime=… -X main.modified=…".
RUN VERSION="$VERSION" REVISION="$REVISION" REVISION_TIME="$REVISION_TIME" MODIFIED="$MODIFIED" \
    scripts/build.sh /out/llmgate \
 && mkdir -p /out/data

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/llmgate /usr/local/bin/llmgate
COPY --from=build --chown=65532:65532 /out/data /data
USER 65532:65532
# The database (llmgate.db, relative to the working directory) and the
# usage spool live in /data.
WORKDIR /data
VOLUME ["/data"]
EXPOSE 4000
# llmgate listens on 127.0.0.1 by default; inside a container it must
# listen on every interface to be reachable through a published port.
# This flag overrides the config's listen: publish the port to choose who
# can reach it (-p 127.0.0.1:4000:4000 for this host only).
ENTRYPOINT ["/usr/local/bin/llmgate", "serve", "--listen", "0.0.0.0:4000"]
