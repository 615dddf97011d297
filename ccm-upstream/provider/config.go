package provider

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"sigs.k8s.io/yaml"
)

// Config is the cloud-config file, the same format fakecloud-ccm and fakecloud-vpc-router read
// (api/src/cloud_config.rs): YAML, unknown keys refused so that a typo is an error, not a silent default.
//
//	endpoint: http://127.0.0.1:8787   # the emulator's URL (required)
//	token-file: /etc/fakecloud/token   # a file holding the API token ...
//	# token: <value>                   # ... or the token itself: exactly one of the two
//	region: local-1                    # optional: refuse to start against an emulator serving another region
type Config struct {
	Endpoint  string `json:"endpoint"`
	Token     string `json:"token,omitempty"`
	TokenFile string `json:"token-file,omitempty"`
	Region    string `json:"region,omitempty"`
}

// ReadConfig parses and checks the cloud-config, and reads the token file it names into Token.
func ReadConfig(r io.Reader) (*Config, error) {
	if r == nil {
		return nil, errors.New("no --cloud-config given; it is required (endpoint, token or token-file)")
	}
	text, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("cloud-config: %w", err)
	}
	var cfg Config
	if err := yaml.UnmarshalStrict(bytes.TrimSpace(text), &cfg); err != nil {
		return nil, fmt.Errorf("cloud-config: %w", err)
	}
	if cfg.Endpoint == "" {
		return nil, errors.New("cloud-config: endpoint is required")
	}
	switch {
	case cfg.Token != "" && cfg.TokenFile == "":
	case cfg.Token == "" && cfg.TokenFile != "":
		token, err := os.ReadFile(cfg.TokenFile)
		if err != nil {
			return nil, fmt.Errorf("cloud-config: token-file %s: cannot read it: %w", cfg.TokenFile, err)
		}
		cfg.Token = strings.TrimSpace(string(token))
		if cfg.Token == "" {
			return nil, fmt.Errorf("cloud-config: token-file %s: the token is empty", cfg.TokenFile)
		}
	default:
		return nil, errors.New("cloud-config: give exactly one of token and token-file")
	}
	cfg.Endpoint = strings.TrimRight(cfg.Endpoint, "/")
	return &cfg, nil
}
