package dashboard

import "context"

// AddrForExamples is the package's test server's host:port, for the
// examples (package dashboard_test).
func AddrForExamples() string {
	addr, err := server.Addr(context.Background())
	if err != nil {
		panic(err)
	}
	return addr
}
