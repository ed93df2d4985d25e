# A static saltus on a minimal base: docker build -t saltus .
# (make release builds the same binaries without Docker; make image the same
# image, on scratch, with internal/cmd/mkimage: its test checks they agree.)
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-X main.version=${VERSION} -s -w" -o /saltus ./cmd/saltus

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /saltus /usr/local/bin/saltus
COPY deploy/saltus.yaml /etc/saltus/saltus.yaml
EXPOSE 8080 9180 7946/tcp 7946/udp
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/saltus"]
CMD ["serve", "--config", "/etc/saltus/saltus.yaml", "--admin-listen", "0.0.0.0:9180"]
