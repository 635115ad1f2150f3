package server_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tandemhq/tandem/internal/testenv"
)

// mustBuildTandemctl builds cmd/tandemctl into a temporary directory, with
// the VCS commit stamped when the checkout has one.
func mustBuildTandemctl(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", "..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "tandemctl")
	cmd := exec.Command("go", "build", "-buildvcs=true", "-o", bin, "./cmd/tandemctl")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/tandemctl: %v\n%s", err, out)
	}
	return bin
}

// ctlResult is one tandemctl run.
type ctlResult struct {
	code           int
	stdout, stderr string
}

// runCtl runs tandemctl with args against the admin API at url.
func runCtl(t *testing.T, bin, url, token string, args ...string) ctlResult {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "TANDEM_ADMIN_URL="+url, "TANDEM_ADMIN_TOKEN="+token, "USER=ctl-tester")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	r := ctlResult{stdout: out.String(), stderr: errOut.String()}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	default:
		t.Fatalf("run tandemctl %v: %v", args, err)
	}
	return r
}

func TestE2ETandemctl(t *testing.T) {
	testenv.RequireIntegration(t)
	bin := mustBuildTandemctl(t)
	cfg, _ := MustConfig(t)
	in := MustRunMain(t, cfg)
	podA, podB := cfg.Pods[0].Name, cfg.Pods[1].Name
	in.Checkout.must(http.MethodPut, inventoryPath(shopA, 1, 1), obj{"on_hand": 3}, http.StatusOK)
	in.Checkout.must(http.MethodPost, "/v1/reservations", cart("ctl-1", shopA, line(1, 1, 1)), http.StatusCreated)

	tests := []struct {
		name     string
		args     []string
		token    string // default: the admin token
		code     int
		contains []string // in stdout, or in stderr when code != 0
	}{
		{"PodsListsBoth", []string{"pods"}, "", 0, []string{podA, podB, "shadow", "redis", "1-9", "10-19"}},
		{"PodsOfOne", []string{"pods", podB}, "", 0, []string{podB}},
		{"ModeToShadow", []string{"mode", podB, "shadow", "--reason", "x"}, "", 0, []string{podB, "shadow"}},
		{"ModeRefusedByGates", []string{"mode", podA, "mysql", "--reason", "x"}, "", 1, []string{"transition_refused", "min_comparisons"}},
		{"ModeDryRunRefused", []string{"mode", podA, "mysql", "--reason", "x", "--dry-run"}, "", 1, []string{"would be refused", "min_comparisons"}},
		{"ModeOfUnknownPod", []string{"mode", "nope", "shadow", "--reason", "x"}, "", 1, []string{"unknown_pod"}},
		{"ModeWithoutReason", []string{"mode", podB, "redis"}, "", 2, nil},
		{"KillWithoutTargets", []string{"kill", "--reason", "x"}, "", 2, []string{"--pods a,b, or --all"}},
		{"KillEmptyPods", []string{"kill", "--pods", "", "--reason", "x"}, "", 2, []string{"--pods names no pod"}},
		{"KillEmptyPodName", []string{"kill", "--pods", podA + ",," + podB, "--reason", "x"}, "", 2, []string{"empty name"}},
		{"KillUnknownPod", []string{"kill", "--pods", podA + ",nope", "--reason", "x"}, "", 1, []string{"unknown_pod", "nope"}},
		{"NothingKilledYet", []string{"killswitch"}, "", 0, []string{"kill switch: off"}},
		{"KillOne", []string{"kill", "--pods", podB, "--reason", "x"}, "", 0, []string{"ENGAGED", podB}},
		{"Kill", []string{"kill", "--all", "--reason", "x"}, "", 0, []string{"ENGAGED", podA, podB}},
		{"KillswitchShows", []string{"killswitch"}, "", 0, []string{"ENGAGED"}},
		{"UnkillWithoutTargets", []string{"unkill", "--reason", "x"}, "", 2, []string{"--pods a,b, or --all"}},
		{"Unkill", []string{"unkill", "--all", "--reason", "x"}, "", 0, []string{"kill switch: off"}},
		{"Report", []string{"report"}, "", 0, []string{podA, podB}},
		{"AuditClean", []string{"audit", podA}, "", 0, []string{"audit of " + podA, "clean"}},
		{"Log", []string{"log"}, "", 0, []string{"killswitch_engage", "set_mode", "ctl-tester"}},
		{"Divergences", []string{"divergences", "--pod", podA}, "", 0, nil},
		{"Instances", []string{"instances"}, "", 0, []string{in.Main.InstanceID}},
		{"WrongToken", []string{"pods"}, "wrong", 1, []string{"unauthorized"}},
		{"NoToken", []string{"pods"}, "-", 2, nil},
		{"UnknownCommand", []string{"frobnicate"}, "", 2, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			token := tt.token
			switch token {
			case "":
				token = in.AdminToken
			case "-":
				token = ""
			}
			r := runCtl(t, bin, in.AdminURL, token, tt.args...)
			if r.code != tt.code {
				t.Fatalf("got exit code %d, want %d\nstdout: %s\nstderr: %s", r.code, tt.code, r.stdout, r.stderr)
			}
			out := r.stdout
			if tt.code != 0 {
				out = r.stderr
			}
			for _, want := range tt.contains {
				if !strings.Contains(out, want) {
					t.Errorf("got output %q, want it to contain %q", out, want)
				}
			}
		})
	}

	t.Run("JSONPods", func(t *testing.T) {
		r := runCtl(t, bin, in.AdminURL, in.AdminToken, "--json", "pods")
		if r.code != 0 {
			t.Fatalf("got exit code %d (%s), want 0", r.code, r.stderr)
		}
		var ans struct {
			Pods []struct {
				Pod, Mode  string
				KillSwitch bool `json:"kill_switch"`
			} `json:"pods"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &ans); err != nil {
			t.Fatalf("got stdout %q, want the JSON answer: %v", r.stdout, err)
		}
		modes := map[string]string{}
		for _, p := range ans.Pods {
			modes[p.Pod] = p.Mode
			if p.KillSwitch {
				t.Errorf("got pod %s killed after unkill, want off", p.Pod)
			}
		}
		if modes[podA] != "shadow" || modes[podB] != "shadow" {
			t.Errorf("got modes %v, want both shadow after `mode %s shadow`", modes, podB)
		}
	})

	t.Run("ChangesReachTheServer", func(t *testing.T) {
		in.Admin.tb = t
		if got := podStatus(in.Admin, podB)["mode"]; got != "shadow" {
			t.Errorf("got pod B mode %v, want shadow", got)
		}
		if !auditLogHas(in.Admin, "set_mode", podB, "x") {
			t.Errorf("got no set_mode entry for pod B in the audit log")
		}
	})
}
