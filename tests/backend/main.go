// Command backend is the test backend of the real node's e2e tests (host/wasmop/tests): it answers
// every request with 200 and "<pod name> <value of $BACKEND_MESSAGE>\n", on $PORT (default 8080).
package main

import (
	"fmt"
	"log"
	"net/http"
	"os"
)

func main() {
	port := os.Getenv("PORT")
	if port == "" {
		port = "8080"
	}
	pod, _ := os.Hostname()
	if name := os.Getenv("POD_NAME"); name != "" {
		pod = name
	}
	message := os.Getenv("BACKEND_MESSAGE")
	http.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "%s %s\n", pod, message)
	})
	log.Printf("listening on :%s", port)
	log.Fatal(http.ListenAndServe(":"+port, nil))
}
