package provider

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCloudConfigIsFakecloudCCMs(t *testing.T) {
	load := func(text string) (*Config, error) { return ReadConfig(strings.NewReader(text)) }
	if _, err := load("endpoint: http://x\n"); err == nil || !strings.Contains(err.Error(), "exactly one of token") {
		t.Errorf("no token: %v", err)
	}
	if _, err := load("endpoint: http://x\ntoken: t\nregoin: r\n"); err == nil || !strings.Contains(err.Error(), "regoin") {
		t.Errorf("an unknown key must be an error naming it: %v", err)
	}
	if cfg, err := load("endpoint: http://x/\ntoken: t\n"); err != nil || cfg.Token != "t" || cfg.Endpoint != "http://x" {
		t.Errorf("token: %+v, %v", cfg, err)
	}
	dir := t.TempDir()
	tf := filepath.Join(dir, "token")
	if err := os.WriteFile(tf, []byte("secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := load("endpoint: http://x\ntoken-file: " + tf + "\nregion: r\n")
	if err != nil || cfg.Token != "secret" || cfg.Region != "r" {
		t.Errorf("token-file: %+v, %v", cfg, err)
	}
	if _, err := load("endpoint: http://x\ntoken-file: /nonexistent/token\n"); err == nil || !strings.Contains(err.Error(), "cannot read it") {
		t.Errorf("missing token file: %v", err)
	}
	if _, err := ReadConfig(nil); err == nil {
		t.Error("no --cloud-config must be an error")
	}
}
