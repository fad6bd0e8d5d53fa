# syntax=docker/dockerfile:1

# Both binaries, dispatchd (the default) and logsink, in one small image:
#   docker build -t taskd .
#   docker run taskd                                    # dispatchd
#   docker run --entrypoint /usr/local/bin/logsink taskd # logsink
# Configuration is the DISPATCH_* environment (docs/CONFIG.md).

FROM golang:1.26 AS build
WORKDIR /src
# Modules first, so editing the code does not download them again.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
# Static binaries (no cgo), no local paths in them, no symbol tables.
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o /out/ ./cmd/dispatchd ./cmd/logsink

# Alpine rather than distroless: its busybox gives the compose healthchecks wget and
# pidof. The binaries themselves need nothing but CA certificates and time zones.
FROM alpine:3.22
RUN apk add --no-cache ca-certificates tzdata \
    && addgroup -S -g 10001 taskd \
    && adduser -S -D -H -u 10001 -G taskd -s /sbin/nologin taskd \
    && mkdir -p /var/lib/taskd/artifacts && chown -R 10001:10001 /var/lib/taskd
# dispatchd keeps uploaded software artifacts here (a volume in docker-compose.yml; a new
# named volume takes this directory's owner, so the taskd user can write it).
ENV DISPATCH_ARTIFACT_DIR=/var/lib/taskd/artifacts
COPY --from=build /out/dispatchd /out/logsink /usr/local/bin/
USER 10001:10001
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/dispatchd"]
