// The dashboard's Copy buttons (templates/admin/index.html), loaded after the configurations they copy.
document.querySelectorAll("#forge-dashboard button.copy").forEach((button) => {
  button.addEventListener("click", async () => {
    const text = document.getElementById(button.dataset.copy).textContent;
    try {
      await navigator.clipboard.writeText(text);
      button.textContent = "Copied";
    } catch {
      // No clipboard outside a secure context (plain http on a non-loopback host): select the text instead.
      const range = document.createRange();
      range.selectNodeContents(document.getElementById(button.dataset.copy));
      window.getSelection().removeAllRanges();
      window.getSelection().addRange(range);
      button.textContent = "Selected: press Ctrl+C";
    }
    setTimeout(() => { button.textContent = "Copy"; }, 2000);
  });
});
