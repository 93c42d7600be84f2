# syntax=docker/dockerfile:1

# Build: a static binary (no cgo), so the runtime image needs no libc of its own.
# The image sets GOTOOLCHAIN=local, so its Go must be at least go.mod's `go`
# line: the tag names the exact release (a cached golang:1.26 may be older);
# composecheck fails when go.mod asks for more than this.
FROM golang:1.26.8 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/stock ./cmd/stock

# Runtime: alpine rather than distroless for busybox wget, which the compose
# health checks use to ask /readyz. The binary embeds migrations/.
FROM alpine:3.22
RUN adduser -D -H -u 10001 stock
COPY --from=build /out/stock /stock
USER 10001:10001
EXPOSE 8080
ENTRYPOINT ["/stock"]
CMD ["serve"]
