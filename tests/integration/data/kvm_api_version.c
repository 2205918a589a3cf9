/* Opens the device named by argv[1] and prints the answer of KVM_GET_API_VERSION
 * (_IO(0xAE, 0x00), linux/kvm.h); exits 0 when it is 12, the stable KVM API. */
#include <fcntl.h>
#include <stdio.h>
#include <sys/ioctl.h>

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s /dev/kvm\n", argv[0]);
        return 2;
    }
    int fd = open(argv[1], O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        perror(argv[1]);
        return 2;
    }
    int version = ioctl(fd, 0xAE00, 0);
    printf("KVM_GET_API_VERSION=%d\n", version);
    return version == 12 ? 0 : 1;
}
