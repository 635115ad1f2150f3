package server

import (
	"net/url"

	"github.com/go-sql-driver/mysql"
	"gopkg.in/yaml.v3"
)

// Redacted is a placeholder for a secret left out of GET /admin/config.
const Redacted = "REDACTED"

// Redacted returns the effective configuration as GET /admin/config serves
// it: the YAML keys and values (durations as "250ms"), with DSN passwords
// and webhook URLs' paths, queries and credentials (a Slack webhook's path
// is its secret) replaced by REDACTED. Tokens come from the environment
// and are never part of it.
func (c Config) Redacted() map[string]any {
	r := c
	r.Control.MySQLDSN = redactDSN(c.Control.MySQLDSN)
	r.Pods = make([]PodConfig, len(c.Pods))
	for i, p := range c.Pods {
		p.MySQLDSN = redactDSN(p.MySQLDSN)
		r.Pods[i] = p
	}
	r.Rollout.Plan.Webhooks = redactURLs(c.Rollout.Plan.Webhooks)
	r.Rollout.Plan.ConfirmWebhooks = redactURLs(c.Rollout.Plan.ConfirmWebhooks)
	out := map[string]any{}
	b, err := yaml.Marshal(r)
	if err == nil {
		err = yaml.Unmarshal(b, &out)
	}
	if err != nil {
		// A validated Config always round-trips; say so rather than serve half.
		return map[string]any{"error": "config not serializable: " + err.Error()}
	}
	return out
}

// redactDSN replaces a MySQL DSN's password; a DSN that does not parse is
// redacted whole.
func redactDSN(dsn string) string {
	if dsn == "" {
		return ""
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return Redacted
	}
	if cfg.Passwd != "" {
		cfg.Passwd = Redacted
	}
	return cfg.FormatDSN()
}

func redactURLs(urls []string) []string {
	if urls == nil {
		return nil
	}
	out := make([]string, len(urls))
	for i, s := range urls {
		u, err := url.Parse(s)
		if err != nil || u.Host == "" {
			out[i] = Redacted
			continue
		}
		red := url.URL{Scheme: u.Scheme, Host: u.Host}
		if u.Path != "" && u.Path != "/" || u.RawQuery != "" || u.User != nil {
			red.Path = "/" + Redacted
		}
		out[i] = red.String()
	}
	return out
}
