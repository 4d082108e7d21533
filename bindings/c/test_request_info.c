/*
 * The C ABI's path helper, apf_request_info_parse_query, on every case of
 * tests/data/request-info-cases.json (what Kubernetes' own request-info
 * parser answers; the file is given as tab-separated lines written by
 * scripts/request-info-cases-tsv.py), and the older
 * apf_request_info_parse on the cases it can express (no query, or only
 * watch=WORD). Under ASan the out_name text each call fills is checked to
 * be freed.
 *
 * Build and run: bindings/c/run-tests.sh (also under ASan and UBSan).
 */
#define _POSIX_C_SOURCE 200809L

#include "apf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { FIELDS = 11 };

static int failures = 0;

static int same(apf_str got, const char *want) {
  size_t n = strlen(want);
  return got.len == n && (n == 0 || memcmp(got.ptr, want, n) == 0);
}

/* Compare a parsed request with the case's wanted fields (f[3..10]),
 * printing what differs; frees the verb. */
static void expect(apf_request_info *info, char **f, const char *what) {
  int ok = info->verb.len == strlen(f[3]) && memcmp(info->verb.ptr, f[3], info->verb.len) == 0 &&
           info->is_resource_request == (strcmp(f[4], "1") == 0) &&
           same(info->api_group, f[5]) && same(info->resource, f[6]) &&
           same(info->subresource, f[7]) && same(info->namespace_, f[8]) &&
           same(info->name, f[9]) && same(info->path, f[10]);
  if (!ok) {
    failures++;
    fprintf(stderr, "FAIL %s %s %s=%s: got verb=%.*s name=%.*s namespace=%.*s resource=%.*s\n",
            f[0], f[1], what, f[2], (int)info->verb.len, info->verb.ptr, (int)info->name.len,
            info->name.ptr ? info->name.ptr : "", (int)info->namespace_.len,
            info->namespace_.ptr ? info->namespace_.ptr : "", (int)info->resource.len,
            info->resource.ptr ? info->resource.ptr : "");
  }
  apf_text_free(&info->verb);
}

/* The watch value a case's query is exactly (`watch=WORD`, WORD letters
 * and digits), "" for no query, NULL when the query says more. */
static const char *watch_value(const char *query) {
  if (query[0] == '\0') return "";
  if (strncmp(query, "watch=", 6) != 0 || query[6] == '\0') return NULL;
  for (const char *c = query + 6; *c; c++) {
    if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9')))
      return NULL;
  }
  return query + 6;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s request-info-cases.tsv\n", argv[0]);
    return 2;
  }
  FILE *in = fopen(argv[1], "r");
  if (!in) {
    perror(argv[1]);
    return 2;
  }
  char *line = NULL;
  size_t cap = 0;
  int cases = 0, by_watch_value = 0;
  while (getline(&line, &cap, in) > 0) {
    line[strcspn(line, "\n")] = '\0';
    char *f[FIELDS];
    int n = 0;
    for (char *p = line; n < FIELDS; n++) {
      f[n] = p;
      char *tab = strchr(p, '\t');
      if (!tab) {
        n++;
        break;
      }
      *tab = '\0';
      p = tab + 1;
    }
    if (n != FIELDS) {
      fprintf(stderr, "FAIL a line with %d fields\n", n);
      failures++;
      continue;
    }
    cases++;
    apf_request_info info;
    apf_text name = {0};
    apf_status st = apf_request_info_parse_query(f[0], strlen(f[0]), f[1], strlen(f[1]), f[2],
                                                 strlen(f[2]), &info, &name);
    if (st != APF_OK) {
      fprintf(stderr, "FAIL %s %s query=%s: status %d\n", f[0], f[1], f[2], (int)st);
      failures++;
      continue;
    }
    expect(&info, f, "query");
    apf_text_free(&name);

    const char *watch = watch_value(f[2]);
    if (!watch) continue;
    by_watch_value++;
    st = apf_request_info_parse(f[0], strlen(f[0]), f[1], strlen(f[1]), watch, strlen(watch), &info);
    if (st != APF_OK) {
      fprintf(stderr, "FAIL %s %s watch=%s: status %d\n", f[0], f[1], watch, (int)st);
      failures++;
      continue;
    }
    expect(&info, f, "watch-value query");
  }
  free(line);
  fclose(in);

  /* Refusals: a NULL out or out_name, a path that is not UTF-8. */
  apf_request_info info;
  apf_text name = {0};
  if (apf_request_info_parse_query("GET", 3, "/", 1, "", 0, NULL, &name) != APF_ERR_NULL_POINTER ||
      apf_request_info_parse_query("GET", 3, "/", 1, "", 0, &info, NULL) != APF_ERR_NULL_POINTER ||
      apf_request_info_parse_query("GET", 3, "\xff", 1, "", 0, &info, &name) !=
          APF_ERR_INVALID_UTF8) {
    fprintf(stderr, "FAIL a bad argument was not refused\n");
    failures++;
  }
  /* A query is bytes, as in Kubernetes: a watch value that is not UTF-8
   * is still neither 0 nor false. */
  if (apf_request_info_parse_query("GET", 3, "/api/v1/pods", 12, "watch=\xff", 7, &info, &name) !=
          APF_OK ||
      info.verb.len != 5 || memcmp(info.verb.ptr, "watch", 5) != 0) {
    fprintf(stderr, "FAIL a query that is not UTF-8\n");
    failures++;
  } else {
    apf_text_free(&info.verb);
    apf_text_free(&name);
  }

  if (cases < 70 || by_watch_value < 40) {
    fprintf(stderr, "FAIL only %d cases (%d by watch value)\n", cases, by_watch_value);
    failures++;
  }
  printf("test_request_info: %d cases (%d also by watch value), %d failures\n", cases,
         by_watch_value, failures);
  return failures ? 1 : 0;
}
