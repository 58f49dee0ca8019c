// plot.cc: WritePlot, PlotScript.
#include "trainer/plot.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace strata {
namespace {

// gnuplot strings are single-quoted; a quote inside is doubled.
std::string Quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

}  // namespace

std::string PlotScript(const TrainingCurves& c, const std::string& png_path) {
  std::ostringstream s;
  s.precision(9);
  const bool auc = std::any_of(c.evals.begin(), c.evals.end(), [](const auto& e) { return e.auc >= 0; });
  s << "set terminal pngcairo size 960,540 noenhanced\n"
    << "set output " << Quoted(png_path) << "\n"
    << "set title " << Quoted(c.title) << "\n"
    << "set xlabel 'step'\nset ylabel 'loss'\nset grid\nset key top right\n";
  s << "$loss << EOD\n";
  // A moving average beside the raw loss: per-step losses are noisy.
  const size_t window = std::max<size_t>(1, c.losses.size() / 50);
  double sum = 0;
  for (size_t i = 0; i < c.losses.size(); ++i) {
    sum += c.losses[i];
    if (i >= window) sum -= c.losses[i - window];
    s << c.first_step + static_cast<int64_t>(i) + 1 << ' ' << c.losses[i] << ' '
      << sum / static_cast<double>(std::min(i + 1, window)) << "\n";
  }
  s << "EOD\n$eval << EOD\n";
  for (const auto& e : c.evals) s << e.step << ' ' << e.loss << ' ' << (e.auc >= 0 ? e.auc : 0.0) << "\n";
  s << "EOD\n";
  std::string plot = "plot $loss using 1:2 with lines lc rgb '#c0c0e0' title 'loss', "
                     "$loss using 1:3 with lines lw 2 lc rgb '#2040a0' title 'loss (moving mean)'";
  if (!c.evals.empty()) plot += ", $eval using 1:2 with linespoints pt 7 lc rgb '#208020' title 'eval loss'";
  if (auc) {
    s << "set y2label 'AUC'\nset y2tics\nset ytics nomirror\n";
    plot += ", $eval using 1:3 axes x1y2 with linespoints pt 5 lc rgb '#c04000' title 'AUC'";
    if (c.oracle_auc >= 0) {
      s << "oracle = " << c.oracle_auc << "\n";
      plot += ", oracle axes x1y2 with lines dt 2 lc rgb '#c04000' title 'oracle AUC'";
    }
  }
  s << plot << "\nunset output\n";
  return s.str();
}

Status WritePlot(const TrainingCurves& curves, const std::string& png_path, const std::string& gnuplot) {
  if (curves.losses.empty()) return Status::InvalidArgument("no losses to plot (no step ran)");
  const std::string script = PlotScript(curves, png_path);
  int in[2], err[2];
  if (pipe2(in, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) {
    return Status::IOError("pipe: " + std::string(strerror(errno)));
  }
  // The exec failure is reported through the error pipe with this marker.
  const std::string marker = "strata-exec-failed:";
  const pid_t pid = fork();
  if (pid < 0) return Status::IOError("fork: " + std::string(strerror(errno)));
  if (pid == 0) {
    dup2(in[0], 0);
    dup2(err[1], 1);
    dup2(err[1], 2);
    const char* argv[] = {gnuplot.c_str(), nullptr};
    execvp(argv[0], const_cast<char* const*>(argv));
    const std::string why = marker + strerror(errno);
    ssize_t ignored = write(2, why.data(), why.size());
    (void)ignored;
    _exit(127);
  }
  close(in[0]);
  close(err[1]);
  // gnuplot reads the whole script before it draws; a broken pipe is reported by its exit.
  struct sigaction ignore {}, old {};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &ignore, &old);
  for (size_t at = 0; at < script.size();) {
    const ssize_t n = write(in[1], script.data() + at, script.size() - at);
    if (n <= 0) break;
    at += static_cast<size_t>(n);
  }
  close(in[1]);
  sigaction(SIGPIPE, &old, nullptr);
  std::string output;
  char buf[4096];
  for (ssize_t n; (n = read(err[0], buf, sizeof(buf))) > 0;) output.append(buf, static_cast<size_t>(n));
  close(err[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (output.rfind(marker, 0) == 0) {
    return Status::NotFound("cannot run " + gnuplot + " (" + output.substr(marker.size()) +
                            "); install gnuplot (Debian: gnuplot-nox) for train.plot_path");
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return Status::IOError(gnuplot + " failed drawing " + png_path + ": " + output);
  }
  std::error_code ec;
  if (std::filesystem::file_size(png_path, ec) == 0 || ec) {
    return Status::IOError(gnuplot + " left no picture at " + png_path + (output.empty() ? "" : ": " + output));
  }
  return Status::OK();
}

}  // namespace strata
