package server

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestServeListenFlags checks that --listen and --admin-listen override the
// config file's addresses and the demo's defaults.
func TestServeListenFlags(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tandem.yaml")
	if err := os.WriteFile(path, []byte(exampleConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	env := func(string) string { return "" }
	tests := []struct {
		name                  string
		args                  []string
		wantListen, wantAdmin string
		wantDemo              bool
	}{
		{"ConfigAlone", []string{"--config", path}, "127.0.0.1:8080", "127.0.0.1:8081", false},
		{"ConfigOverridden", []string{"--config", path, "--listen", "127.0.0.1:9080", "--admin-listen", "0.0.0.0:9081"},
			"127.0.0.1:9080", "0.0.0.0:9081", false},
		{"DemoDefaults", nil, "127.0.0.1:8080", "127.0.0.1:8081", true},
		{"DemoOverridden", []string{"--admin-listen", "127.0.0.1:0", "--listen", "127.0.0.1:0"}, "127.0.0.1:0", "127.0.0.1:0", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := NewMain()
			m.Stdout, m.Stderr = &bytes.Buffer{}, &bytes.Buffer{}
			if err := m.ParseFlags(tt.args, env); err != nil {
				t.Fatal(err)
			}
			if m.Config.Listen != tt.wantListen || m.Config.AdminListen != tt.wantAdmin || m.Demo != tt.wantDemo {
				t.Errorf("got listen %q, admin %q, demo %v; want %q, %q, %v",
					m.Config.Listen, m.Config.AdminListen, m.Demo, tt.wantListen, tt.wantAdmin, tt.wantDemo)
			}
		})
	}
}
