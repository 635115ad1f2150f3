package bench

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sort"
	"time"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/internal/loadgen"
)

// KillSwitchResult is `tandem bench http --killswitch`'s figure: how long
// a kill switch change made on one instance takes to reach another.
type KillSwitchResult struct {
	Suite   string  `json:"suite"`
	Toggles int     `json:"toggles"`
	P50MS   float64 `json:"p50_ms"`
	P99MS   float64 `json:"p99_ms"`
	MaxMS   float64 `json:"max_ms"`
	// APIP99MS is the p99 of the engaging instance's own answer.
	APIP99MS float64 `json:"api_p99_ms"`
	// Errors counts failed requests and changes not seen within the
	// propagation timeout.
	Errors int64 `json:"errors"`
}

// PrintKillSwitch prints the figure as a line, or as JSON.
func PrintKillSwitch(w io.Writer, run *RunInfo, r KillSwitchResult, asJSON bool) error {
	if asJSON {
		return printJSON(w, run, []KillSwitchResult{r})
	}
	_, err := fmt.Fprintf(w, "kill switch propagation between two instances over %d changes: p50 %.2f ms, p99 %.2f ms, max %.2f ms (engaging answer p99 %.2f ms), errors %d\n",
		r.Toggles, r.P50MS, r.P99MS, r.MaxMS, r.APIP99MS, r.Errors)
	return err
}

// killSwitchTimeout bounds the wait for one change to reach the other
// instance; every instance must apply a change within one second.
const killSwitchTimeout = 5 * time.Second

// KillSwitch starts two in-process instances on one control database and
// Redis, changes the kill switch through the first one's admin API
// toggles times and times until the second one's switch (what its router
// reads) shows it.
func KillSwitch(ctx context.Context, start StartFunc, mysqlDSN string, rt Redis, toggles int, progress io.Writer) (KillSwitchResult, error) {
	res := KillSwitchResult{Suite: "killswitch", Toggles: toggles}
	srv, err := newServers(ctx, start, mysqlDSN, rt, 1, tandem.ModeMySQL)
	if err != nil {
		return res, err
	}
	defer srv.close()
	token := randomHex(16)
	a, err := srv.run(ctx, token, progress)
	if err != nil {
		return res, fmt.Errorf("instance A: %w", err)
	}
	defer a.Close()
	bm, err := srv.run(ctx, token, progress)
	if err != nil {
		return res, fmt.Errorf("instance B: %w", err)
	}
	defer bm.Close()
	pod := srv.spec.Pod
	c := newClient(&target{admin: a.AdminAddr(), adminToken: token, pod: pod}, 1)
	defer c.close()
	fmt.Fprintf(progress, "bench killswitch: %d changes on instance A, watched on instance B...\n", toggles)
	var seen, api []time.Duration
	for i := range toggles {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		engage := i%2 == 0
		method := http.MethodDelete
		if engage {
			method = http.MethodPost
		}
		// Spread the changes over B's poll ticker so none lines up with it.
		time.Sleep(time.Duration(5+rand.IntN(45)) * time.Millisecond)
		start := time.Now()
		err := c.call(ctx, method, "/admin/killswitch", map[string]any{"reason": "tandem bench killswitch", "pods": []string{pod}}, nil)
		answered := time.Since(start)
		if err != nil {
			res.Errors++
			fmt.Fprintf(progress, "bench killswitch: change %d: %v\n", i, err)
			continue
		}
		api = append(api, answered)
		for bm.KillSwitchEngaged(pod) != engage {
			if time.Since(start) > killSwitchTimeout {
				break
			}
			time.Sleep(50 * time.Microsecond)
		}
		d := time.Since(start)
		if bm.KillSwitchEngaged(pod) != engage {
			res.Errors++
			fmt.Fprintf(progress, "bench killswitch: change %d not seen by B within %s\n", i, killSwitchTimeout)
			continue
		}
		seen = append(seen, d)
	}
	sort.Slice(seen, func(i, j int) bool { return seen[i] < seen[j] })
	sort.Slice(api, func(i, j int) bool { return api[i] < api[j] })
	res.P50MS, res.P99MS = ms(loadgen.Quantile(seen, 0.5)), ms(loadgen.Quantile(seen, 0.99))
	res.MaxMS = ms(loadgen.Quantile(seen, 1))
	res.APIP99MS = ms(loadgen.Quantile(api, 0.99))
	return res, nil
}
