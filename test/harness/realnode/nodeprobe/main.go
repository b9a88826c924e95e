// Command nodeprobe runs inside pods on the harness's real node and reports,
// as one JSON line on stdout, what a workload there sees: what a DNS name
// resolves to through the cluster DNS, the apiserver's version through the
// in-cluster config (the kubernetes Service IP, through kube-proxy), and
// what each address of a name answers over HTTP. With --serve it is that
// HTTP server, answering its pod name.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sort"
	"strconv"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

type result struct {
	Lookup   []string          `json:"lookup,omitempty"`
	Version  string            `json:"version,omitempty"`
	Answers  map[string]string `json:"answers,omitempty"`
	Errors   []string          `json:"errors,omitempty"`
	Hostname string            `json:"hostname"`
}

func main() {
	lookup := flag.String("lookup", "", "DNS name to resolve")
	version := flag.Bool("version", false, "read the apiserver's version with the in-cluster config")
	dialPort := flag.Int("dial-port", 0, "GET http://ADDR:PORT/ on every address --lookup returned")
	serve := flag.String("serve", "", "serve HTTP on this address, answering the pod name")
	flag.Parse()

	host, _ := os.Hostname()
	if *serve != "" {
		http.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, host) })
		srv := &http.Server{Addr: *serve, ReadHeaderTimeout: 5 * time.Second}
		if err := srv.ListenAndServe(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r := result{Hostname: host, Answers: map[string]string{}}
	if *lookup != "" {
		addrs, err := net.DefaultResolver.LookupHost(ctx, *lookup)
		if err != nil {
			r.Errors = append(r.Errors, "lookup: "+err.Error())
		}
		sort.Strings(addrs)
		r.Lookup = addrs
	}
	if *version {
		cfg, err := rest.InClusterConfig()
		if err == nil {
			var cs *kubernetes.Clientset
			if cs, err = kubernetes.NewForConfig(cfg); err == nil {
				v, verr := cs.Discovery().ServerVersion()
				if err = verr; err == nil {
					r.Version = v.GitVersion + " via " + cfg.Host
				}
			}
		}
		if err != nil {
			r.Errors = append(r.Errors, "version: "+err.Error())
		}
	}
	if *dialPort != 0 {
		client := &http.Client{Timeout: 5 * time.Second}
		for _, a := range r.Lookup {
			resp, err := client.Get("http://" + net.JoinHostPort(a, strconv.Itoa(*dialPort)) + "/")
			if err != nil {
				r.Errors = append(r.Errors, "dial "+a+": "+err.Error())
				continue
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			r.Answers[a] = string(b)
		}
	}
	_ = json.NewEncoder(os.Stdout).Encode(r)
	if len(r.Errors) > 0 {
		os.Exit(1)
	}
}
