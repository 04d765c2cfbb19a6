/*
 * The Open MPI side of the SPERLI benchmark (bench/sperli.mjs builds it with mpicc into a
 * temporary directory): the same cases, calibration and timing as bench/sperli/job.mjs.
 *
 *   mpirun -np N mpi-bench BUDGET_MS [pingpong] [allreduce]
 *
 * Each case: a few warm-up iterations, each timed by rank 0, which picks the number of
 * timed iterations from their median so they take about BUDGET_MS (within per-size
 * bounds) and broadcasts it; then every iteration is timed on rank 0 with MPI_Wtime,
 * back to back, and rank 0 prints one line per case with the median, minimum and the
 * number of iterations:
 *   BENCH {"case":"allreduce","bytes":...,"ranks":...,"iters":...,"medianUs":...,"minUs":...}
 * Ping-pong (ranks 0 and 1; the others wait) times one round trip per iteration. The
 * allreduce is MPI_SUM over MPI_DOUBLE from one buffer into another, checked once.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, n, sizeof(double), cmp);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* The same bounds as job.mjs: [warm-up, least, most] iterations by message size. */
static void bounds(long bytes, int *warm, int *least, int *most) {
  if (bytes >= (16L << 20)) {
    *warm = 3, *least = 8, *most = 40;
  } else if (bytes >= (1L << 20)) {
    *warm = 5, *least = 20, *most = 400;
  } else {
    *warm = 300, *least = 100, *most = 5000;
  }
}

static int rank, size;
static double budget_ms;

static int calibrate(double per, int least, int most) {
  int iters = 0;
  if (rank == 0) {
    double want = per > 0 ? (budget_ms / 1000.0) / per : most;
    iters = want < least ? least : want > most ? most : (int)want;
  }
  MPI_Bcast(&iters, 1, MPI_INT, 0, MPI_COMM_WORLD);
  return iters;
}

static void report(const char *name, long bytes, int iters, double *t) {
  if (rank != 0) return;
  double min = t[0];
  for (int i = 1; i < iters; i++)
    if (t[i] < min) min = t[i];
  double med = median(t, iters);
  printf("BENCH {\"case\":\"%s\",\"bytes\":%ld,\"ranks\":%d,\"iters\":%d,\"medianUs\":%.3f,\"minUs\":%.3f}\n", name,
         bytes, size, iters, med * 1e6, min * 1e6);
  fflush(stdout);
}

static void pingpong(long bytes) {
  int warm, least, most;
  bounds(bytes, &warm, &least, &most);
  char *buf = malloc(bytes);
  memset(buf, rank + 1, bytes);
  double *w = malloc(sizeof(double) * warm);
  for (int i = 0; i < warm; i++) {
    double s = MPI_Wtime();
    if (rank == 0) {
      MPI_Send(buf, bytes, MPI_BYTE, 1, 7, MPI_COMM_WORLD);
      MPI_Recv(buf, bytes, MPI_BYTE, 1, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else if (rank == 1) {
      MPI_Recv(buf, bytes, MPI_BYTE, 0, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Send(buf, bytes, MPI_BYTE, 0, 7, MPI_COMM_WORLD);
    }
    w[i] = MPI_Wtime() - s;
  }
  int iters = calibrate(median(w, warm), least, most);
  free(w);
  double *t = malloc(sizeof(double) * iters);
  for (int i = 0; i < iters; i++) {
    double s = MPI_Wtime();
    if (rank == 0) {
      MPI_Send(buf, bytes, MPI_BYTE, 1, 7, MPI_COMM_WORLD);
      MPI_Recv(buf, bytes, MPI_BYTE, 1, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else if (rank == 1) {
      MPI_Recv(buf, bytes, MPI_BYTE, 0, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Send(buf, bytes, MPI_BYTE, 0, 7, MPI_COMM_WORLD);
    }
    t[i] = MPI_Wtime() - s;
  }
  report("pingpong", bytes, iters, t);
  MPI_Barrier(MPI_COMM_WORLD);
  free(t);
  free(buf);
}

static void allreduce(long bytes) {
  int warm, least, most;
  bounds(bytes, &warm, &least, &most);
  long n = bytes / 8;
  double *in = malloc(bytes), *out = malloc(bytes);
  for (long i = 0; i < n; i++) in[i] = rank + i * 0.5;
  double *w = malloc(sizeof(double) * warm);
  for (int i = 0; i < warm; i++) {
    double s = MPI_Wtime();
    MPI_Allreduce(in, out, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    w[i] = MPI_Wtime() - s;
  }
  int iters = calibrate(median(w, warm), least, most);
  free(w);
  double *t = malloc(sizeof(double) * iters);
  for (int i = 0; i < iters; i++) {
    double s = MPI_Wtime();
    MPI_Allreduce(in, out, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    t[i] = MPI_Wtime() - s;
  }
  double base = size * (size - 1) / 2.0;
  for (long i = 0; i < n; i += (n > 1024 ? n / 1024 : 1)) {
    if (out[i] != base + size * i * 0.5) {
      fprintf(stderr, "allreduce of %ld bytes: element %ld is %g\n", bytes, i, out[i]);
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
  }
  report("allreduce", bytes, iters, t);
  MPI_Barrier(MPI_COMM_WORLD);
  free(t);
  free(in);
  free(out);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  budget_ms = argc > 1 ? atof(argv[1]) : 1000;
  int do_pp = 0, do_ar = 0;
  for (int i = 2; i < argc; i++) {
    if (strcmp(argv[i], "pingpong") == 0) do_pp = 1;
    if (strcmp(argv[i], "allreduce") == 0) do_ar = 1;
  }
  if (do_pp && size >= 2) {
    pingpong(8);
    pingpong(1L << 20);
  }
  if (do_ar) {
    long sizes[] = {8, 64L << 10, 1L << 20, 16L << 20};
    for (int i = 0; i < 4; i++) allreduce(sizes[i]);
  }
  MPI_Finalize();
  return 0;
}
