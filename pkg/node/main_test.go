package node_test

import (
	"context"
	"os"
	"testing"

	"github.com/sglprov/sglprov/test/fakesglang"
)

// fakeServerEnv makes the test binary act as the fake SGLang server (the exec manager's
// unit ExecStart).
const fakeServerEnv = "SGLPROV_NODE_TEST_FAKE_SGLANG"

func TestMain(m *testing.M) {
	if os.Getenv(fakeServerEnv) == "1" {
		os.Exit(fakesglang.Main(context.Background(), os.Args[1:], os.Stderr, os.Getenv))
	}
	os.Exit(m.Run())
}
