# goroce: make test runs the unit suite; make interop runs goroce against
# Linux Soft-RoCE and the real perftest in a QEMU guest (root; docs/INTEROP.md).
GO ?= go

.PHONY: all build test interop interop-down

all: build

build:
	$(GO) build ./...

test:
	$(GO) test ./...

# INTEROP_FLAGS: e.g. -run 'ib_write' -keep -no-build (go run ./test/interop -h)
interop:
	$(GO) run ./test/interop $(INTEROP_FLAGS)

interop-down:
	test/interop/down.sh A
