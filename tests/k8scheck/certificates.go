// The certificates API's checks and signer for the test API server, by Go's crypto/x509, the
// code kube-apiserver and kube-controller-manager use: a CSR parsed and its signature checked
// (kube-apiserver's validation refuses a CSR that does not parse or verify), and an approved
// CSR signed with the cluster CA as the signing controller's authority signs it (the request's
// subject, SANs and key; the usages as key usage and extended key usage; no other extension;
// not a CA; notBefore backdated, notAfter at most the CA's).
package main

import (
	"crypto"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"os"
	"sort"
	"time"
)

type csrFacts struct {
	CN     string   `json:"cn"`
	O      []string `json:"o"`
	DNS    []string `json:"dns"`
	IPs    []string `json:"ips"`
	Emails int      `json:"emails"`
	URIs   int      `json:"uris"`
}

func result(object interface{}, err error) answer {
	if r, ok := err.(*refusal); ok {
		return answer{Code: r.code, Error: r.msg}
	}
	if err != nil {
		return answer{Code: 500, Error: err.Error()}
	}
	raw, _ := json.Marshal(object)
	return answer{OK: true, Object: raw}
}

func parseCSR(data []byte) (*x509.CertificateRequest, error) {
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return nil, refuse(422, "spec.request: Invalid value: []byte{...}: PEM block type must be CERTIFICATE REQUEST")
	}
	csr, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, refuse(422, "spec.request: Invalid value: []byte{...}: %v", err)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, refuse(422, "spec.request: Invalid value: []byte{...}: %v", err)
	}
	return csr, nil
}

func csrInfo(data []byte) (interface{}, error) {
	csr, err := parseCSR(data)
	if err != nil {
		return nil, err
	}
	f := csrFacts{CN: csr.Subject.CommonName, O: csr.Subject.Organization, DNS: csr.DNSNames,
		Emails: len(csr.EmailAddresses), URIs: len(csr.URIs)}
	for _, ip := range csr.IPAddresses {
		f.IPs = append(f.IPs, ip.String())
	}
	return f, nil
}

type signRequest struct {
	CSR      []byte   `json:"csr"`
	CACert   string   `json:"caCert"`
	CAKey    string   `json:"caKey"`
	Usages   []string `json:"usages"`
	Seconds  int64    `json:"seconds"`
	Backdate int64    `json:"backdate"`
	// Short: a lifetime under it is not backdated at its end (the signer's 8 h).
	Short int64 `json:"short"`
}

var keyUsages = map[string]x509.KeyUsage{
	"signing": x509.KeyUsageDigitalSignature, "digital signature": x509.KeyUsageDigitalSignature,
	"content commitment": x509.KeyUsageContentCommitment, "key encipherment": x509.KeyUsageKeyEncipherment,
	"key agreement": x509.KeyUsageKeyAgreement, "data encipherment": x509.KeyUsageDataEncipherment,
	"cert sign": x509.KeyUsageCertSign, "crl sign": x509.KeyUsageCRLSign,
}

var extUsages = map[string]x509.ExtKeyUsage{
	"any": x509.ExtKeyUsageAny, "server auth": x509.ExtKeyUsageServerAuth, "client auth": x509.ExtKeyUsageClientAuth,
}

func sign(body []byte) (interface{}, error) {
	var req signRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, err
	}
	csr, err := parseCSR(req.CSR)
	if err != nil {
		return nil, err
	}
	caPEM, err := os.ReadFile(req.CACert)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(caPEM)
	ca, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, err
	}
	keyPEM, err := os.ReadFile(req.CAKey)
	if err != nil {
		return nil, err
	}
	kb, _ := pem.Decode(keyPEM)
	key, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, err
	}
	var ku x509.KeyUsage
	ekus := map[x509.ExtKeyUsage]bool{}
	for _, u := range req.Usages {
		if k, ok := keyUsages[u]; ok {
			ku |= k
		} else if e, ok := extUsages[u]; ok {
			ekus[e] = true
		} else {
			return nil, refuse(422, "unrecognized usage values: %q", u)
		}
	}
	var sorted []x509.ExtKeyUsage
	for e := range ekus {
		sorted = append(sorted, e)
	}
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, err
	}
	now := time.Now()
	ttl := time.Duration(req.Seconds) * time.Second
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: csr.Subject, DNSNames: csr.DNSNames, IPAddresses: csr.IPAddresses,
		EmailAddresses: csr.EmailAddresses, URIs: csr.URIs, PublicKeyAlgorithm: csr.PublicKeyAlgorithm,
		PublicKey: csr.PublicKey, KeyUsage: ku, ExtKeyUsage: sorted, BasicConstraintsValid: true, IsCA: false,
		NotBefore: now.Add(-time.Duration(req.Backdate) * time.Second),
	}
	if ttl < time.Duration(req.Short)*time.Second {
		tmpl.NotAfter = now.Add(ttl)
	} else {
		tmpl.NotAfter = tmpl.NotBefore.Add(ttl)
	}
	if tmpl.NotAfter.After(ca.NotAfter) {
		tmpl.NotAfter = ca.NotAfter
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, csr.PublicKey, key.(crypto.Signer))
	if err != nil {
		return nil, err
	}
	return map[string]string{"certificate": string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))}, nil
}
