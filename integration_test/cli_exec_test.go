package integration_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"
)

// The command-line tests run the pelwarden binary as a user does: built once
// from the workspace (with -race when the tests are), started per command,
// interrupted with SIGINT when the test's context ends.

// Exit codes of the pelwarden command (cmd/internal/cli's contract with the
// scripts that call it), pinned here as numbers on purpose.
const (
	exitOK        = 0
	exitFailure   = 1
	exitUsage     = 2
	exitBadTarget = 3
)

var (
	cliBuild    sync.Once
	cliBinary   string
	cliBuildErr error
	cliDir      string // removed by TestMain
)

// pelwardenBinary builds the binary on first use.
func pelwardenBinary() (string, error) {
	cliBuild.Do(func() {
		dir, err := os.MkdirTemp("", "pelwarden-cli-")
		if err != nil {
			cliBuildErr = err
			return
		}
		cliDir = dir
		bin := filepath.Join(dir, "pelwarden")
		args := append([]string{"build", "-o", bin}, raceBuildFlags...)
		args = append(args, "github.com/pelwarden/pelwarden/cmd/pelwarden")
		cmd := exec.Command("go", args...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			cliBuildErr = fmt.Errorf("go %v: %w\n%s", args, err, out)
			return
		}
		cliBinary = bin
	})
	return cliBinary, cliBuildErr
}

// removeCLIBinary removes the built binary (TestMain, after the tests).
func removeCLIBinary() {
	if cliDir != "" {
		_ = os.RemoveAll(cliDir)
	}
}

// executeCLI runs `pelwarden args...` and returns its exit code. When ctx
// ends first the command gets SIGINT (it cleans up and exits) and, 30 s
// later, SIGKILL. A failure to start it is written to stderr with code -1.
func executeCLI(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	bin, err := pelwardenBinary()
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "building pelwarden: %v\n", err)
		return -1
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 30 * time.Second
	err = cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return exitOK
	case cmd.ProcessState != nil && cmd.ProcessState.Exited():
		// Its exit code, also when it exited after the interrupt (Run
		// then returns the context's error even for a success).
		return cmd.ProcessState.ExitCode()
	case errors.As(err, &ee) && ee.ExitCode() >= 0:
		return ee.ExitCode()
	default:
		_, _ = fmt.Fprintf(stderr, "running pelwarden: %v\n", err)
		return -1
	}
}
